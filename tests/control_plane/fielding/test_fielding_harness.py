"""Drift scenarios, numpy models, baselines and the comparison harness (small configs)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from control_plane.fielding.config import FieldingConfig
from control_plane.fielding.harness import (
    METHODS,
    HarnessConfig,
    compare,
    rounds_to_target,
)
from control_plane.fielding.models import Model
from control_plane.fielding.scenarios import make_scenario


@pytest.mark.parametrize("hidden", [0, 5])
def test_gradient_matches_finite_differences(hidden):
    rng = np.random.default_rng(0)
    m = Model(4, 3, hidden)
    w = m.init(rng) + 0.1 * rng.standard_normal(m.size)
    X, y = rng.standard_normal((7, 4)), rng.integers(0, 3, 7)
    loss, g = m.loss_grad(w, X, y)
    assert loss == pytest.approx(m.loss(w, X, y))
    for i in rng.choice(m.size, 6, replace=False):
        e = np.zeros(m.size)
        e[i] = 1e-6
        num = (m.loss(w + e, X, y) - m.loss(w - e, X, y)) / 2e-6
        assert g[i] == pytest.approx(num, abs=1e-5)


@pytest.mark.parametrize("kind", ["label", "feature", "concept"])
def test_scenario_drifts_at_events(kind):
    s = make_scenario(kind, "synthetic", 16, 9, seed=3)
    g0, g1, g2 = s.groups(1), s.groups(s.events[0]), s.groups(s.events[1])
    assert set(g0) == {0, 1, 2, 3}
    assert (g1 != g0).sum() == round(0.2 * 16)
    assert 4 in set(g2) and 4 not in set(g1)
    again = make_scenario(kind, "synthetic", 16, 9, seed=3)
    assert np.array_equal(again.data(5, 9).X_train, s.data(5, 9).X_train)
    d = s.data(0, 1)
    assert d.X_train.shape == (60, s.n_features) and len(d.y_test) == 40


def test_scenario_kinds_change_the_right_thing():
    lab = make_scenario("label", "digits", 8, 6, seed=0)
    priors = np.array([sp.prior for sp in lab.specs])
    assert priors.max(axis=1).min() > 0.4  # concentrated class mixes
    con = make_scenario("concept", "digits", 8, 6, seed=0)
    assert any(not np.array_equal(sp.perm, np.arange(10)) for sp in con.specs)
    fea = make_scenario("feature", "digits", 8, 6, seed=0)
    assert len({sp.transform for sp in fea.specs}) == 5


@pytest.mark.parametrize(("kw", "field"), [({"kind": "x"}, "scenario"),
                                           ({"n_clients": 3}, "clients"),
                                           ({"rounds": 2}, "rounds"),
                                           ({"dataset": "mnist"}, "dataset")])
def test_bad_scenario_names_field(kw, field):
    args = {"kind": "label", "dataset": "synthetic"} | kw
    with pytest.raises(ValueError, match=field):
        make_scenario(**args)


def test_rounds_to_target():
    acc = [0.1, 0.5, 0.9, 0.4, 0.95]
    assert rounds_to_target(acc, 0.8) == 3
    assert rounds_to_target(acc, 0.8, start=4) == 2
    assert rounds_to_target(acc, 0.99) is None


def test_compare_small_concept():
    s = make_scenario("concept", "synthetic", 12, 6, seed=1)
    res = compare(s, METHODS, FieldingConfig(), cfg=HarnessConfig(target=0.5))
    json.dumps(res)  # JSON-ready
    m = res["methods"]
    assert set(m) == set(METHODS)
    for v in m.values():
        assert len(v["accuracy"]) == 6 and all(0 <= a <= 1 for a in v["accuracy"])
    # one model cannot fit permuted labels: the oracle beats FedAvg clearly
    assert m["oracle"]["final_accuracy_mean_last"] > m["fedavg"]["final_accuracy_mean_last"] + 0.1
    # IFCA downloads K models per client per round, FedAvg one
    k = m["ifca"]["params"]["k"]
    assert m["ifca"]["bytes"]["models_down"] == k * m["fedavg"]["bytes"]["models_down"]
    assert m["fielding"]["bytes"]["representations"] > 0
    assert m["fedavg"]["bytes"]["representations"] == 0
    assert m["fielding"]["events"][0]["reason"] == "initial"
    assert "gain_pp" in res["summary"]


def test_cli_run_json_and_plot(tmp_path, capsys):
    from control_plane.cli.main import main

    png = tmp_path / "acc.png"
    rc = main(["fielding", "run", "--scenario", "label", "--dataset", "synthetic",
               "--clients", "8", "--rounds", "4", "--methods", "fielding,fedavg",
               "--json", "--no-progress", "--plot", str(png)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["methods"]) == {"fielding", "fedavg"}
    assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"


def test_cli_bad_input_is_usage_error(capsys):
    from control_plane.cli.main import main

    assert main(["fielding", "run", "--scenario", "label", "--methods", "nope"]) == 2
    assert "--methods" in capsys.readouterr().err
    assert main(["fielding", "run", "--scenario", "label", "--tau", "0"]) == 2
    assert "tau" in capsys.readouterr().err


def _fake_result() -> dict:
    """A comparison shaped like :func:`compare`'s: ifca best at the end, fedavg and cfl first to
    the target (the case of issue 36: 'rounds to target 9 vs 8' against ifca's 9)."""
    from control_plane.fielding.harness import summarize

    def method(acc: list[float], rtt: int | None) -> dict:
        return {"accuracy": acc, "final_accuracy_mean_last": sum(acc[-3:]) / 3,
                "rounds_to_target": rtt, "bytes": {"repr_over_updates": 0.0071}}

    methods = {"fielding": method([0.8, 0.9, 0.95, 0.95], 2),
               "fedavg": method([0.9, 0.91, 0.92, 0.92], 1),
               "ifca": method([0.8, 0.89, 0.95, 0.95], 3),
               "cfl": method([0.9, 0.91, 0.92, 0.92], 1),
               "oracle": method([0.8, 0.9, 0.93, 0.93], 2)}
    return {"scenario": "label", "dataset": "digits", "clients": 8, "rounds": 4, "seed": 0,
            "drift_rounds": [2, 3], "target": 0.9, "methods": methods,
            "summary": summarize(methods)}


def test_summary_line_names_the_baseline_each_figure_compares_with():
    from control_plane.fielding.cli import summary_lines

    res = _fake_result()
    s = res["summary"]
    assert s["best_baseline"] == "ifca" and s["fastest_baselines"] == ["fedavg", "cfl"]
    assert s["best_baseline_own_rounds_to_target"] == 3
    lines = summary_lines(res)
    assert lines[0].startswith("FIELDING vs the best baseline by final accuracy (ifca): +")
    # each number next to the method it belongs to, as in the table
    assert lines[1] == "rounds to target 0.9: FIELDING 2, ifca 3, fastest baseline fedavg and cfl 1"
    assert any(line.startswith("oracle: one model per true group") for line in lines)


def test_accuracy_plot_explains_the_oracle(tmp_path, monkeypatch):
    import matplotlib.figure

    from control_plane.fielding.plot import ORACLE_NOTE, plot_accuracy

    figs = []
    real = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *a, **k: (figs.append(fig), real(fig, *a, **k))[1])
    plot_accuracy(_fake_result(), tmp_path / "a.png")
    fig = figs[0]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:4] == ["fielding", "fedavg", "ifca", "cfl (same curve as fedavg)"]
    assert legend[4].startswith("oracle (")
    caption = fig._supxlabel.get_text().replace("\n", " ")
    assert caption == ORACLE_NOTE
