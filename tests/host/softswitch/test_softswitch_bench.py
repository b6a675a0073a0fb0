"""The benchmark script runs end to end in a tiny configuration (loopback UDP, no root) and
reports positive rates for both the echo limit and the aggregating switch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from host.paths import REPO


@pytest.mark.parametrize("generator", ["c", "python"])
def test_benchmark_reports_echo_and_aggregate_rates(generator):
    p = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "softswitch.py"), "--modes", "udp", "--workers", "2",
         "--seconds", "0.5", "--warmup", "0.3", "--window", "16", "--generator", generator, "--json"],
        capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    report = json.loads(p.stdout.strip().splitlines()[-1])
    (r,) = report["results"]
    assert (r["transport"], r["workers"]) == ("udp", 2)
    for kind in ("echo", "aggregate"):
        assert r[kind]["packets_per_s"] > 0
        assert r[kind]["coords_per_s"] == pytest.approx(256 * r[kind]["packets_per_s"], rel=0.01)
    assert r["aggregate"]["rounds_min"] > 0    # every slot completed rounds: results came back
