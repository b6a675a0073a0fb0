#!/usr/bin/env python3
"""Attach benchmark: how fast a user's torchrun job learns what is wrong (docs/attach.md).

Prints one JSON object::

    {"check_ok_s", "check_mismatch_s": {"num_slots", "coords_per_packet", "lane_bits", "token"},
     "kill_to_error_s", "kill_to_exit_s", "restart": {"operator_s", "resume_s", "exit_code",
     "losses_equal"}, "give_up_s", "repeats", "*_runs": [...]}

The switch is the software target (``python -m host.softswitch``) on loopback UDP; the job is
applied and written with the ``netco`` command line (``netco controller apply``, ``netco
controller job``), as an operator does. Then, each ``--repeats`` times (medians, per-run
values in ``*_runs``):

* ``check_ok_s``: the start-up check (:func:`host.transport.session.check_job`) on the job as
  installed; ``check_mismatch_s``: how long it takes to raise on a job file that differs in
  one field from the switch (the issue's bound: 2 s);
* ``kill_to_error_s`` / ``kill_to_exit_s``: ``examples/train_ddp.py --netco`` under
  ``torchrun --nproc_per_node 2``; the switch SIGKILLed after step 10; seconds from the kill
  to the first ``SlotTimeoutError`` line in the output and to torchrun's exit (bounds 3 s and
  5 s at the default ``NETCO_GIVE_UP`` of 3 s);
* ``restart``: the same script with ``NETCO_GIVE_UP=60``; the switch SIGKILLed after step 10,
  started again empty and reconciled with ``netco controller apply`` (``operator_s``: kill to
  apply done), ``resume_s``: apply done to the next step printed; the losses against THC over
  gloo (``losses_equal``).

    .venv/bin/python benchmarks/attach.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from host.ddp.attach import CHECK_TIMEOUT_S, GIVE_UP_S
from host.paths import REPO
from host.softswitch.launch import UdpSwitch as Switch
from host.softswitch.launch import stop_process
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.jobfile import load
from host.transport.ports import UdpEndpoint
from host.transport.session import JobCheckError, check_job

EXAMPLE = REPO / "examples" / "train_ddp.py"
NETCO = [sys.executable, "-c", "import sys; from control_plane.cli.main import main; "
                               "sys.exit(main())"]


def netco(*args: str) -> None:
    res = subprocess.run([*NETCO, *args], capture_output=True, text=True, cwd=REPO, timeout=120)
    if res.returncode:
        raise SystemExit(f"netco {' '.join(args)} failed: {res.stderr.strip()}")


class Run:
    """torchrun running the example; output lines with their arrival times."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", str(EXAMPLE), *args]
        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, cwd=REPO, env={**os.environ, **env})
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def first(self, text: str, after: float = 0.0, timeout: float = 120.0) -> float:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for t, ln in list(self.lines):
                if t >= after and text in ln:
                    return t
            if self.proc.poll() is not None and not self.t.is_alive():
                break
            time.sleep(0.01)
        raise SystemExit(f"no {text!r} in the output:\n" + "".join(ln for _, ln in self.lines))


def check_times(job_path: Path, sw: Switch) -> tuple[float, dict[str, float]]:
    jf = load(job_path)

    def agg(**over) -> NetworkAggregator:
        m = jf.member(0)
        fields = {"num_slots": jf.num_slots, "lane_bits": jf.lane_bits, "token": jf.token,
                  "coords_per_packet": jf.coords_per_packet, **over}
        return NetworkAggregator(UdpEndpoint(m.switch_udp, bind=(m.ip, 0)),
                                 JobSpec(jf.job_id, 0, jf.world, granularity=jf.g, **fields))

    a = agg()
    t0 = time.monotonic()
    check_job(a, CHECK_TIMEOUT_S)
    ok = time.monotonic() - t0
    a.close(finish=False)
    bad = {"num_slots": {"num_slots": jf.num_slots * 2},
           "coords_per_packet": {"coords_per_packet": 512},
           "lane_bits": {"lane_bits": 16}, "token": {"token": jf.token ^ 0x5A5A}}
    out = {}
    for field, over in bad.items():
        a = agg(**over)
        t0 = time.monotonic()
        try:
            check_job(a, CHECK_TIMEOUT_S)
            raise SystemExit(f"the check passed a job file with another {field}")
        except JobCheckError:
            out[field] = time.monotonic() - t0
        finally:
            a.close(finish=False)
    return ok, out


def kill_run(job: Path, sw: Switch) -> tuple[float, float]:
    run = Run(["--netco", "--steps", "100000"], {"NETCO_JOB": str(job)})
    run.first("step  10")
    t_kill = time.monotonic()
    sw.kill()
    t_err = run.first("SlotTimeoutError", after=t_kill)
    run.proc.wait(60)
    t_exit = time.monotonic()
    sw.start()
    return t_err - t_kill, t_exit - t_kill


def restart_run(job: Path, sw: Switch, config: Path, tmp: Path) -> dict:
    out = tmp / "losses.json"
    run = Run(["--netco", "--steps", "60", "--losses", str(out)],
              {"NETCO_JOB": str(job), "NETCO_GIVE_UP": "60"})
    run.first("step  10")
    t_kill = time.monotonic()
    sw.kill()
    sw.start()
    netco("controller", "apply", str(config))
    t_apply = time.monotonic()
    t_step = run.first("step ", after=t_apply)
    rc = run.proc.wait(120)
    ref = tmp / "gloo.json"
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc_per_node", "2", str(EXAMPLE), "--thc-gloo", "--steps", "60",
                          "--losses", str(ref)], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    if res.returncode:
        raise SystemExit(f"THC over gloo failed:\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    equal = rc == 0 and json.loads(out.read_text()) == json.loads(ref.read_text())
    return {"operator_s": round(t_apply - t_kill, 3), "resume_s": round(t_step - t_apply, 3),
            "exit_code": rc, "losses_equal": equal}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print JSON only (no progress lines)")
    p.add_argument("--repeats", type=int, default=3, help="runs per measurement (default 3)")
    args = p.parse_args()
    if args.repeats < 1:
        raise SystemExit("--repeats: give 1 or more")
    with tempfile.TemporaryDirectory(prefix="netco-attach-bench-") as d:
        tmp = Path(d)
        os.environ.setdefault("NETCO_STATE_DIR", str(tmp / "state"))
        sw = Switch(tmp, 2)
        sw.start()
        try:
            config = tmp / "net.yaml"
            config.write_text(yaml.safe_dump({
                "switches": [{"name": "s1", "address": f"127.0.0.1:{sw.grpc}", "addr": "10.0.0.254",
                              "target": "softswitch",
                              "udp": {n: f"127.0.0.1:{q}" for n, q in sw.ports.items()}}],
                "hosts": [{"name": "h1", "ip": "127.0.0.11", "attach": "s1:1"},
                          {"name": "h2", "ip": "127.0.0.12", "attach": "s1:2"}],
                "jobs": [{"name": "demo", "id": 1, "members": ["h1", "h2"]}]}))
            netco("controller", "apply", str(config))
            job = tmp / "job.json"
            netco("controller", "job", str(config), "demo", "--out", str(job))
            checks, kills = [], []
            for k in range(args.repeats):
                if not args.json:
                    print(f"run {k + 1}/{args.repeats}: start-up checks, kill", file=sys.stderr)
                checks.append(check_times(job, sw))
                kills.append(kill_run(job, sw))
                netco("controller", "apply", str(config))
            if not args.json:
                print("restart recovered with netco controller apply", file=sys.stderr)
            restart = restart_run(job, sw, config, tmp)
        finally:
            stop_process(sw.proc)
    med = statistics.median
    fields = checks[0][1].keys()
    out = {
        "give_up_s": GIVE_UP_S, "check_timeout_s": CHECK_TIMEOUT_S, "repeats": args.repeats,
        "check_ok_s": round(med(c[0] for c in checks), 4),
        "check_mismatch_s": {f: round(med(c[1][f] for c in checks), 3) for f in fields},
        "kill_to_error_s": round(med(k[0] for k in kills), 3),
        "kill_to_exit_s": round(med(k[1] for k in kills), 3),
        "restart": restart,
        "check_ok_s_runs": [round(c[0], 4) for c in checks],
        "kill_to_error_s_runs": [round(k[0], 3) for k in kills],
        "kill_to_exit_s_runs": [round(k[1], 3) for k in kills],
    }
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
