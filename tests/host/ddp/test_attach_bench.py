"""benchmarks/attach.py runs and reports every bound of the attach issue (one repeat)."""

from __future__ import annotations

import json
import subprocess
import sys

from host.paths import REPO


def test_attach_benchmark_reports_each_bound():
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "attach.py"), "--json",
                          "--repeats", "1"], capture_output=True, text=True, cwd=REPO,
                         timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert set(out["check_mismatch_s"]) == {"num_slots", "coords_per_packet", "lane_bits",
                                            "token"}
    # a mismatch never takes longer than the check's timeout (how much sooner a switch that
    # answers makes it is the benchmark's to report, not a timed assertion)
    assert all(0 < v <= out["check_timeout_s"] + 0.5 for v in out["check_mismatch_s"].values())
    assert 0 < out["kill_to_error_s"] <= out["kill_to_exit_s"]
    assert out["restart"]["exit_code"] == 0 and out["restart"]["losses_equal"]
    assert len(out["kill_to_exit_s_runs"]) == 1
