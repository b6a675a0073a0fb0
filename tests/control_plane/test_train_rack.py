"""``netco train --testbed rack|mininet``: the comparison on a shaped testbed, time measured."""

from __future__ import annotations

import json

import pytest

from control_plane.cli.main import main
from tests.support.rootless import needs_namespaces

TESTBEDS = [
    pytest.param("rack", 2, 200, "namespace rack", marks=[
        pytest.mark.slow,
        needs_namespaces]),
    pytest.param("mininet", 4, 100, "Mininet rack", marks=[pytest.mark.root, pytest.mark.mininet]),
]


@pytest.mark.parametrize(("testbed", "workers", "mbps", "kind"), TESTBEDS)
def test_train_on_a_testbed_reports_measured_time(tmp_path, capsys, testbed, workers, mbps, kind):
    out = tmp_path / "r.json"
    rc = main(["train", "--task", "digits", "--workers", str(workers), "--compressor", "thc",
               "--testbed", testbed, "--link-mbps", str(mbps), "--steps", "4", "--eval-every",
               "2", "--target", "0.0", "--out", str(out)])
    assert rc == 0
    table = capsys.readouterr().out
    assert "meas. s" in table and "emul. s" not in table
    assert (f"measured wall-clock time to target, links shaped to {mbps} Mbit/s per worker "
            f"({kind})") in table
    rep = json.loads(out.read_text())
    assert rep["time_basis"] == "measured"
    assert rep["network"] == f"{kind}, links shaped to {mbps} Mbit/s"
    assert set(rep["testbed"]["measured_mbps"]) == {f"h{r + 1}" for r in range(workers)}
    s = rep["summary"]["thc"]
    assert s["aggregator"] == "network" and s["time_basis"] == "measured"
    assert s["emulated_s"] is None
    # target 0: reached at the first evaluation (step 2); its time is the two steps' wall time
    recs = rep["runs"][0]["records"]
    assert s["steps_to_target"] == 2
    assert s["time_to_target_s"] == pytest.approx(recs[0]["wall_s"] + recs[1]["wall_s"])
    assert rep["runs"][0]["network_stats"]["min_count"] == workers


@pytest.mark.slow
@needs_namespaces
def test_the_racks_switch_gets_thc_granularity_of_the_run(tmp_path, capsys):
    # g = 63: 2 x 63 still fits 8-bit lanes; the switch's job must use g's table, or the
    # workers refuse ("codec g=63 but the job was set up for g=30")
    out = tmp_path / "r.json"
    rc = main(["train", "--task", "digits", "--workers", "2", "--compressor", "thc",
               "--testbed", "rack", "--link-mbps", "200", "--steps", "2", "--eval-every", "2",
               "--granularity", "63", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    rep = json.loads(out.read_text())
    assert rep["runs"][0]["config"]["thc"]["granularity"] == 63
    assert rep["runs"][0]["network_stats"]["min_count"] == 2
    # THC's phases are in every step record: where the hook's time went
    assert all({"encode", "network", "decode", "cpu"} <= set(r["phases"])
               for r in rep["runs"][0]["records"])
