"""Search: ranked feasible plans, pinned fields, the Megatron baseline, infeasible clusters."""

from __future__ import annotations

from control_plane.scaleacross.cost import evaluate
from control_plane.scaleacross.plan import check_plan
from control_plane.scaleacross.search import megatron_default, ranked, search
from tests.support.scaleacross import scenario


def test_search_ranks_feasible_plans_and_beats_the_default():
    sc = scenario()
    res = search(sc)
    assert res.n_total > 1000 and 0 < res.n_feasible < res.n_total
    top = ranked(res, 5)
    times = [met["iteration_s"] for _, met in top]
    assert times == sorted(times)
    for pl, met in top:
        check_plan(sc, pl)  # every ranked plan is a valid layout
        r = evaluate(sc, pl.to_arrays())
        assert bool(r["fits"][0]) and bool(r["placeable"][0])
        assert float(r["iteration_s"][0]) == met["iteration_s"]
        assert abs(sum(met["breakdown"].values()) - met["iteration_s"]) < 1e-9
    base = megatron_default(sc)
    assert base.tp == 8 and base.dp_sync == "ring" and base.interleave == 1
    assert times[0] <= float(evaluate(sc, base.to_arrays())["iteration_s"][0])
    # nothing feasible is faster than the reported best
    ok = res.metrics["fits"] & res.metrics["placeable"]
    assert res.metrics["iteration_s"][ok].min() == times[0]


def test_pinned_fields_restrict_the_space():
    sc = scenario(parallel={"tp": 2, "recompute": "full", "cross": "pp"})
    res = search(sc)
    assert set(res.plans["tp"].tolist()) == {2}
    assert set(res.plans["rc"].tolist()) == {2}
    assert set(res.plans["cross"].tolist()) == {2}
    assert all(pl.cross == "pp" and pl.pp > 1 for pl, _ in ranked(res, 3))


def test_thin_cross_building_link_changes_the_best_plan():
    fat = ranked(search(scenario()), 1)[0][0]
    thin = scenario(cluster={"cross_building": {"gbps": 1, "latency_us": 20000}})
    best_thin = ranked(search(thin), 1)[0][0]
    # with a 1 Gb/s, 20 ms link the best plan avoids crossing or crosses with PP
    assert best_thin.cross in ("none", "pp") and best_thin != fat


def test_a_model_that_fits_nowhere_has_no_feasible_plan():
    sc = scenario(model={"layers": 64, "hidden": 16384, "heads": 128},
                  cluster={"buildings": [{"gpus": 8}, {"gpus": 8}]})
    assert search(sc).n_feasible == 0


def test_search_text_says_less_or_more_time_than_megatron():
    from control_plane.scaleacross.cli import _fmt_breakdown, _vs_megatron

    assert _vs_megatron(43.72) == "43.7% less time than Megatron's default"
    assert _vs_megatron(-5.0) == "5.0% more time than Megatron's default"
    assert _vs_megatron(0.01) == "as fast as Megatron's default"
    assert _fmt_breakdown({"compute": 0.9021, "bubble": 0.0}) == "compute 0.902 s"
