"""Network plan file and the ``netco explore`` command line."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from control_plane.cli.main import main
from control_plane.scaleacross.netplan import build_network_plan
from control_plane.scaleacross.plan import resolve_plan
from tests.support.scaleacross import raw, scenario

INA = {"cross_building": {"ina": True, "thc": True, "parallel_links": 2, "gbps": 400}}


def test_plan_maps_every_rank_once_and_trees_cover_dp_groups():
    sc = scenario(cluster=INA, parallel={"tp": 4, "pp": 2, "cp": 2, "dp_sync": "thc"})
    pl = resolve_plan(sc)
    assert pl.cross == "dp" and pl.world == 128
    doc = build_network_plan(sc, pl)
    assert doc["version"] == 1
    ranks = doc["ranks"]
    assert sorted(r["rank"] for r in ranks) == list(range(128))
    assert Counter(r["building"] for r in ranks) == {"A": 64, "B": 64}
    assert len({(r["host"], r["gpu"]) for r in ranks}) == 128
    # TP groups stay on one host
    by_group = {}
    for r in ranks:
        by_group.setdefault((r["cp"], r["dp"], r["pp"]), set()).add(r["host"])
    assert all(len(h) == 1 for h in by_group.values())
    # one tree per (stage, TP rank); its leaves hold exactly the DP x CP group
    trees = doc["aggregation_trees"]
    assert len(trees) == pl.pp * pl.tp
    for t in trees:
        members = {r["rank"] for r in ranks
                   if r["pp"] == t["group"]["pp"] and r["tp"] == t["group"]["tp"]}
        leaf_ranks = [x for leaf in t["leaves"] for x in leaf["ranks"]]
        assert sorted(leaf_ranks) == sorted(members) and len(members) == pl.dp * pl.cp
        assert t["root"] == "xcore" and all(leaf["parent"] == "xcore" for leaf in t["leaves"])
        assert t["compression"] == {"up_bits": 4, "down_bits": 8}
    # cross-building flows: explicit hops over named uplinks, split over the 2 parallel links
    links = {x["name"] for x in doc["cross_links"]}
    assert links == {"A-x0", "A-x1", "B-x0", "B-x1"}
    flows = doc["cross_building_flows"]
    assert {f["class"] for f in flows} == {"dp_thc_up", "dp_thc_down"}
    for f in flows:
        assert f["mode"] == "split"
        assert sum(p["share"] for p in f["paths"]) == pytest.approx(1.0)
        for p in f["paths"]:
            assert p["hops"][0] == f["src"] and p["hops"][-1] == f["dst"]
            assert all(h in links or h in ("A", "B", "xcore") for h in p["hops"])
    up = next(f for f in flows if f["class"] == "dp_thc_up")["bytes_per_iteration"]
    down = next(f for f in flows if f["class"] == "dp_thc_down")["bytes_per_iteration"]
    assert down == pytest.approx(2 * up)  # 8-bit down vs 4-bit up


def test_pp_crossing_plan_lists_boundary_flows():
    sc = scenario(parallel={"tp": 8, "pp": 2, "dp": 8, "cross": "pp", "interleave": 2})
    doc = build_network_plan(sc, resolve_plan(sc))
    pp = next(c for c in doc["traffic_classes"] if c["class"] == "pp")
    crossing = [b for b in pp["boundaries"] if b["crosses_buildings"]]
    assert {(b["from_stage"], b["to_stage"]) for b in crossing} == {(0, 1), (1, 0)}
    flows = doc["cross_building_flows"]
    assert {f["class"] for f in flows} == {"pp_activations", "pp_gradients"}
    assert all(f["mode"] == "pinned" and len(f["paths"]) == 1 for f in flows)
    assert all(len(t["leaves"]) == 1 for t in doc["aggregation_trees"])  # DP stays inside


def _write(tmp_path, data) -> str:
    p = tmp_path / "s.json"
    p.write_text(json.dumps(data))
    return str(p)


def test_cli_predict_json(tmp_path, capsys):
    path = _write(tmp_path, raw(parallel={"tp": 8, "pp": 2}))
    assert main(["explore", "predict", path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"iteration_s", "breakdown", "memory_gb_per_gpu", "fits"} <= set(out)
    assert out["fits"] is True and out["iteration_s"] > 0
    assert out["simulated"]["iteration_s"] == pytest.approx(out["iteration_s"], rel=0.25)


def test_cli_bad_scenario_names_the_field(tmp_path, capsys):
    bad = raw()
    bad["model"]["heads"] = 0
    assert main(["explore", "predict", _write(tmp_path, bad)]) == 2
    assert "model.heads" in capsys.readouterr().err


def test_cli_nan_in_yaml_scenario_is_one_line(tmp_path, capsys):
    """YAML's .nan is a float: predict must refuse it, not print NaN (invalid JSON)."""
    path = tmp_path / "nan.yaml"
    text = json.dumps(raw())
    path.write_text(text.replace('"peak_tflops": 312', '"peak_tflops": .nan'))
    assert main(["explore", "predict", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert "hardware.peak_tflops" in err and "finite" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_search_plot_and_plan(tmp_path, capsys):
    path = _write(tmp_path, raw())
    png = tmp_path / "b.png"
    assert main(["explore", "search", path, "--top", "3", "--json", "--plot", str(png),
                 "--simulate", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["plans"]) == 3 and out["plans"][0]["rank"] == 1
    assert "simulated" in out["plans"][0] and "simulated" not in out["plans"][1]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plan = tmp_path / "plan.json"
    assert main(["explore", "plan", path, "--out", str(plan)]) == 0
    doc = json.loads(plan.read_text())
    assert doc["version"] == 1 and doc["plan"] == out["plans"][0]["plan"]


def _timing_rows(text: str) -> list[str]:
    """The rows of the first table of ``explore search`` (up to its first blank line)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("plan "))
    rows = []
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith("  "):
            break
        rows.append(line)
    return rows


def test_cli_search_prints_tables_without_abbreviation_codes(tmp_path, capsys):
    """Issue 36: a table with a header, no rc=/ovl=/cross=/v=/mb codes, and every row has the
    simulated time or a reason stated under the table."""
    path = _write(tmp_path, raw())
    assert main(["explore", "search", path, "--top", "5"]) == 0
    out = capsys.readouterr().out
    for code in ("rc=", "ovl=", "cross=", "(v=", " mb1", " mb2", "sync="):
        assert code not in out
    assert "time per iteration (s)" in out and "event simulation (s)" in out
    assert "TP, PP, DP, CP, EP: tensor-, pipeline-, data-, context- and expert-parallel" in out
    rows = _timing_rows(out)
    assert [r.split()[0] for r in rows] == ["#1", "#2", "#3", "#4", "#5", "Megatron"]
    for r in rows:   # by default every plan shown is simulated, Megatron's default too
        assert re.search(r"\d\.\d{3}\s+\d\.\d{3}\s", r), r
    assert main(["explore", "search", path, "--top", "5", "--simulate", "2"]) == 0
    out = capsys.readouterr().out
    rows = _timing_rows(out)
    assert all("not run" in r for r in rows[2:-1])
    assert all(re.search(r"\d\.\d{3}\s+\d\.\d{3}\s", r) for r in (*rows[:2], rows[-1]))
    assert "not run: --simulate 2 checks the 2 best plans and Megatron's default" in out


def test_cli_search_plot_legend_uses_the_tables_names(tmp_path, monkeypatch, capsys):
    import matplotlib.figure

    figs = []
    real = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *a, **k: (figs.append(fig), real(fig, *a, **k))[1])
    path = _write(tmp_path, raw())
    assert main(["explore", "search", path, "--top", "2", "--plot", str(tmp_path / "p.png")]) == 0
    out = capsys.readouterr().out
    (ax,) = figs[0].axes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "compute" in legend and not any("_" in t for t in legend)
    lines = out.splitlines()
    header = lines[lines.index("time per iteration by part (s):") + 1]
    assert all(name in header for name in legend)
    labels = " ".join(t.get_text() for t in ax.get_yticklabels())
    assert "rc=" not in labels and "ovl=" not in labels and "Megatron default" in labels
