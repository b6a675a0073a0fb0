"""benchmarks/chaos.py end to end in a tiny configuration: every class runs and reports its
correctness fields (exact sums, no deadlock, forged results dropped, the controller answers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def test_chaos_benchmark_runs_every_class_and_sums_stay_exact():
    p = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "chaos.py"), "--json", "--restarts", "1",
         "--iterations", "1", "--elements", "8192", "--dead-packets", "256", "--dead-repeats", "1",
         "--give-up", "1.5", "--streams", "40"],
        capture_output=True, text=True, timeout=600, cwd=REPO, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout[p.stdout.index("{"):])
    assert r["fuzz_member_addresses"]["exact"] and r["fuzz_member_addresses"]["datagrams"] > 0
    assert r["forged_results"]["exact"] and min(r["forged_results"]["foreign_results"]) > 0
    far = r["far_future_rounds"]    # issue 16, H2: no stall any more (token and round window)
    assert not far["stalled"] and far["exact"] and far["timeouts"] == 0
    assert far["dropped_bad_sender"] == 32 and far["dropped_ahead"] == 32
    assert r["switch_restarts"]["restarts"] == 1 and r["switch_restarts"]["deadlocks"] == 0
    assert r["switch_restarts"]["exact"]
    # recovered as an operator does: `netco controller apply FILE`, the token from the state file
    assert r["switch_restarts"]["recovery"].startswith("netco controller apply FILE")
    assert r["switch_restarts"]["errors"] == []
    assert r["dead_rank_partial"]["exact_where_full"] and r["dead_rank_partial"]["repeats"] == 1
    assert r["idle_streams"]["answered"] and r["idle_streams"]["held"]
    # issue 33, a class per finding (the timing ones report, the rest must hold here too)
    assert r["start_flood"]["hung"] == 0 and r["start_flood"]["exact_after"]
    assert r["replay"]["held"]
    assert r["cross_job"]["exact"] and r["cross_job"]["peeks_answered"] > 0
    assert r["token_flood"]["exact"] and not r["token_flood"]["guess_confirmed_while_held"]
    pf = r["port_flood"]              # the token from an unbound port: counted, then held
    assert pf["exact"] and pf["drops"].get("RATE_LIMITED", 0) > 0 and not pf["answered"]
    assert r["values_above_g"]["held"] and r["values_above_g"]["dropped_malformed"] == 16
    lap = r["lapping_member"]        # obeyed, the laps reset copies and every rank gave up
    assert lap["held"] and lap["exact"] and lap["errors"] == [] and lap["dropped_ahead"] > 0
    port = r["sender_port"]          # bound to the job's worker_port: the spoofed STARTs dropped
    assert port["held"] and port["errors"] == [] and port["dropped_bad_sender"] >= port["spoofed"]
    assert all("held" in v for v in r.values())


def _spinning() -> set[int]:
    """PIDs of the processes that run ``--busy``'s loop (from /proc)."""
    out = set()
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and b"while True: pass" in (d / "cmdline").read_bytes():
                out.add(int(d.name))
        except OSError:
            continue
    return out


def test_busy_runs_the_classes_beside_spinning_processes_and_ends_them():
    """``--busy N`` (issue 33: the dead-rank ratio on a loaded machine): each class reports the
    load it ran under, and the spinning processes are gone afterwards (ended by PID)."""
    before = _spinning()
    p = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "chaos.py"), "--json", "--only",
         "values_above_g", "--busy", "2", "--busy-warm", "0.5", "--give-up", "1.5"],
        capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout[p.stdout.index("{"):])["values_above_g"]
    assert r["busy"] == 2 and r["load_average_1min"] >= 0 and r["held"]
    assert _spinning() <= before
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks" / "chaos.py"), "--busy", "-1"],
                         capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert bad.returncode == 2 and "--busy=-1" in bad.stderr and "Traceback" not in bad.stderr


def _dead_rank(tmp_path: Path, target: str, env: dict | None = None,
               extra: tuple[str, ...] = ()) -> dict:
    p = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "chaos.py"), "--json", "--only",
         "dead_rank_partial", "--dead-target", target, "--dead-packets", "128",
         "--dead-bmv2-packets", "128", "--dead-repeats", "1", *extra],
        capture_output=True, text=True, timeout=600, cwd=REPO, check=False, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout[p.stdout.index("{"):])["dead_rank_partial"]


@pytest.mark.root
@pytest.mark.bmv2
@pytest.mark.p4c
@pytest.mark.mininet
def test_dead_rank_on_bmv2_is_exact_where_full_and_reports_its_ratio(tmp_path):
    """Issue 33 (carried over): the dead-rank class on BMv2 through netco testbed's Mininet rack
    (the controller applies the file over P4Runtime), in a tiny configuration."""
    from control_plane.config import DEFAULT_BMV2_JSON

    if not DEFAULT_BMV2_JSON.exists():
        pytest.skip(f"{DEFAULT_BMV2_JSON} not built (netco p4 build needs p4c)")
    r = _dead_rank(tmp_path, "bmv2", extra=("--dead-watch", "0.3"))
    b = r["bmv2"]
    assert "skipped" not in b, b
    # the controller's watch ran beside it (netco controller apply --watch --dead-after)
    w = b["watch"]
    assert w["dead_after_s"] == 0.3 and w["rounds"] > 0 and w["failed_rounds"] == 0, w
    assert b["target"] == "bmv2" and b["workers"] == 4 and b["packets"] == 128
    assert b["errors"] == [] and b["exact_where_full"]
    assert b["full_count_fraction"] > 0          # some packets had all three live ranks in
    assert b["ratio"] > 0 and len(b["ratio_runs"]) == 1 and isinstance(b["within_2x"], bool)
    assert b["deadlines"] > 0                     # the dead rank was released by DEADLINEs
    assert r["held_targets"] == ["bmv2"] and r["held"] == b["held"]
    assert "ratio" not in r                       # the software target was not asked for


def test_dead_rank_without_bmv2_says_what_to_install_and_claims_nothing(tmp_path):
    """No ``simple_switch_grpc`` on PATH: the BMv2 part is one line naming what to install,
    the software target's part is measured, and ``held`` covers only what was measured."""
    from tests.support.hidepath import path_without

    env = {**os.environ, "PATH": path_without(tmp_path / "bin", "simple_switch_grpc")}
    r = _dead_rank(tmp_path, "both", env)
    assert list(r["bmv2"]) == ["skipped"]
    why = r["bmv2"]["skipped"]
    assert "simple_switch_grpc" in why and "install BMv2" in why and "\n" not in why
    assert r["held_targets"] == ["softswitch"] and r["exact_where_full"] and r["ratio"] > 0
