"""A user's own torchrun script through a switch, the way a user runs it (issue "Attach and
operate from the outside"): ``examples/train_ddp.py`` under ``torchrun --nproc_per_node 2``,
the job applied and handed over by the ``netco`` command line (``netco run``, ``netco
controller apply``, ``netco controller job``), the software target as a process of its own on
loopback UDP. No root.

* the losses equal THC over gloo bit for bit, and a second run right after, with the
  defaults, does too;
* the switch killed mid-training, started again empty and reconciled with ``netco controller
  apply``: training continues, losses exact;
* the switch killed for good: every rank raises the hook's own error naming the switch, and
  torchrun exits;
* a job file that differs from the switch (slots, token): one line naming it, before the first
  step;
* PyTorch Lightning's ``DDPStrategy`` with netco's hook and state (``examples/train_lightning.py``)
  equals the same Lightning run with THC over gloo.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from host.paths import REPO
from tests.support.rootless import needs_nsenter
from tests.support.switchproc import Switch, job_config, run_netco

EXAMPLE = REPO / "examples" / "train_ddp.py"
LIGHTNING = REPO / "examples" / "train_lightning.py"
STEPS = 60


def torchrun(*args: str, script: Path = EXAMPLE) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            "2", str(script), "--steps", str(STEPS), *args]


class Run:
    """A torchrun job in the background; its output collected line by line."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.seen = threading.Event()
        self.want = ""
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, cwd=REPO, env={**os.environ, **env})
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if self.want and self.want in line:
                self.seen.set()

    def wait_for(self, text: str, timeout: float = 120) -> None:
        self.want = text
        if any(text in ln for ln in self.lines):
            return
        assert self.seen.wait(timeout), "".join(self.lines[-30:])

    def finish(self, timeout: float = 180) -> tuple[int, str]:
        rc = self.proc.wait(timeout)
        self.reader.join(10)
        return rc, "".join(self.lines)


@pytest.fixture(scope="module")
def gloo_losses(tmp_path_factory) -> list[float]:
    out = tmp_path_factory.mktemp("gloo") / "losses.json"
    res = subprocess.run(torchrun("--thc-gloo", "--losses", str(out)), capture_output=True,
                         text=True, cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(out.read_text())


@pytest.fixture
def switch(tmp_path: Path):
    sw = Switch(tmp_path, 2).start()
    try:
        yield sw
    finally:
        sw.stop()


def _job_file(tmp_path: Path, config: Path) -> Path:
    res = run_netco("controller", "apply", str(config))
    assert res.returncode == 0, res.stdout + res.stderr
    job = tmp_path / "job.json"
    res = run_netco("controller", "job", str(config), "demo", "--out", str(job))
    assert res.returncode == 0, res.stdout + res.stderr
    return job


def test_torchrun_attach_equals_thc_over_gloo_and_runs_again(switch, tmp_path, gloo_losses):
    config = job_config(tmp_path / "net.yaml", switch)
    for k in range(2):        # the second run right after the first, with the defaults
        out = tmp_path / f"losses{k}.json"
        res = run_netco("run", "--config", str(config), "--job", "demo", "--",
                        *torchrun("--netco", "--losses", str(out)), timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        assert json.loads(out.read_text()) == gloo_losses


def test_torchrun_attach_survives_a_switch_restart_recovered_with_the_cli(switch, tmp_path,
                                                                            gloo_losses):
    config = job_config(tmp_path / "net.yaml", switch)
    job = _job_file(tmp_path, config)
    out = tmp_path / "losses.json"
    run = Run(torchrun("--netco", "--losses", str(out)),
              {"NETCO_JOB": str(job), "NETCO_GIVE_UP": "120"})
    try:
        run.wait_for("step  10")
        switch.kill()
        switch.start()                     # empty: no pipeline, no job, no token
        res = run_netco("controller", "apply", str(config))
        assert res.returncode == 0, res.stdout + res.stderr
        rc, text = run.finish()
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert rc == 0, text
    assert json.loads(out.read_text()) == gloo_losses


def test_torchrun_attach_switch_killed_names_it_and_exits(switch, tmp_path):
    config = job_config(tmp_path / "net.yaml", switch)
    job = _job_file(tmp_path, config)
    run = Run(torchrun("--netco", "--steps", "100000"), {"NETCO_JOB": str(job)})
    try:
        run.wait_for("step  10")
        t_kill = time.monotonic()
        switch.kill()
        rc, text = run.finish(timeout=60)
        took = time.monotonic() - t_kill
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert rc != 0
    udp = switch.ports[1]
    assert f"SlotTimeoutError: job 1 rank 0: no result from switch 127.0.0.1:{udp}" in text, text
    assert "last exchange completed at" in text
    assert "Unable to cast" not in text            # the hook's own error, not DDP's
    # the bound is 3 s to the error and 5 s to the exit (benchmarks/attach.py measures them);
    # here only that it is not the old 40 s
    assert took < 15, took


@pytest.mark.parametrize(("field", "value", "words"), [
    ("num_slots", 32, ["num_slots: the job file says 32", "gives the job 16"]),
    ("token", 7, ["answered no status request", "token"]),
])
def test_torchrun_attach_mismatch_is_one_named_line(switch, tmp_path, field, value, words):
    config = job_config(tmp_path / "net.yaml", switch)
    job = _job_file(tmp_path, config)
    obj = json.loads(job.read_text())
    obj[field] = value
    job.write_text(json.dumps(obj))
    res = subprocess.run(torchrun("--netco"), capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "NETCO_JOB": str(job)}, timeout=120)
    text = res.stdout + res.stderr
    assert res.returncode != 0
    errors = [ln for ln in text.splitlines() if "AttachError:" in ln]
    assert errors, text
    line = errors[0]
    for w in words:
        assert w in line, (w, line)
    assert "step   0" not in text                 # before the first step


def test_torchrun_attach_lightning_strategy_equals_thc_over_gloo(switch, tmp_path):
    pytest.importorskip("lightning", reason="PyTorch Lightning not installed "
                                            "(pip install 'netco[lightning]')")
    config = job_config(tmp_path / "net.yaml", switch)
    losses = {}
    for how in ("--thc-gloo", "--netco"):
        out = tmp_path / f"losses{how}.json"
        cmd = torchrun(how, "--losses", str(out), script=LIGHTNING)
        if how == "--netco":
            res = run_netco("run", "--config", str(config), "--job", "demo", "--", *cmd,
                            timeout=300)
        else:
            res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        losses[how] = json.loads(out.read_text())
    assert len(losses["--netco"]) == STEPS
    assert losses["--netco"] == losses["--thc-gloo"]




@needs_nsenter
def test_torchrun_two_nodes_attach_on_the_shaped_rack():
    """``torchrun --nnodes 2``: one node per namespace of the rack, each rank binding its
    namespace's address, links shaped to 100 Mbit/s (verified); the same losses as THC over
    gloo across the same nodes; and with the nodes numbered the other way round."""
    from control_plane.testbed.isolate import run_isolated

    got = run_isolated("tests.support.attach_rack:two_nodes",
                       {"link_mbps": 100.0, "steps": 10,
                        "modes": ("--netco", "--thc-gloo", "reversed")}, timeout_s=600)
    assert got["rack"]["measured_mbps"]          # the shaping was measured before use
    runs = got["runs"]
    assert len(runs["netco"]["losses"]) == 10
    assert runs["netco"]["losses"] == runs["thc-gloo"]["losses"]
    # the nodes numbered against the members' order: each rank found its member by address
    # (rank 0 is member h2; its rounding randomness is member 1's, so the losses differ a bit)
    rev = runs["reversed"]["losses"]
    assert len(rev) == 10 and rev[0] == runs["netco"]["losses"][0]
    assert abs(rev[-1] - runs["netco"]["losses"][-1]) < 0.05 * runs["netco"]["losses"][-1]
