"""``netco testbed up|status|down`` end to end: a supervisor holds the network between
commands, ``down`` removes exactly what ``up`` created, and a crashed supervisor's leftovers
are cleaned from the state file."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from control_plane.cli.main import main as netco
from control_plane.config import load_config
from control_plane.testbed.net import with_free_ports
from host.paths import REPO

pytestmark = [pytest.mark.root, pytest.mark.mininet]


def _topo_on_free_ports(tmp_path: Path) -> Path:
    src = (REPO / "mininet" / "rack.yaml").read_text()
    cfg = with_free_ports(load_config(REPO / "mininet" / "rack.yaml"))
    topo = tmp_path / "rack.yaml"
    topo.write_text(re.sub(r"127\.0\.0\.1:\d+", cfg.switches[0].address, src))
    return topo


def _ours(tag: str) -> list[str]:
    return [n for n in os.listdir("/sys/class/net") if n.startswith(tag)]


@pytest.fixture
def rack(tmp_path):
    """The rack's topology on free ports and a state file: (the options naming both, the state
    file). Whatever the test left up is torn down after it."""
    state = tmp_path / "state.json"
    common = ["--topo", str(_topo_on_free_ports(tmp_path)), "--state", str(state)]
    try:
        yield common, state
    finally:
        if state.exists():
            netco(["testbed", "down", *common])


def test_up_status_down(rack, tmp_path, capsys):
    common, state = rack
    tag = f"c{os.getpid() % 1000}"
    assert netco(["testbed", "up", *common, "--tag", tag, "--target", "softswitch",
                  "--workdir", str(tmp_path / "wd")]) == 0
    out = capsys.readouterr().out
    assert f"testbed {tag} up" in out and "softswitch" in out
    assert len(_ours(tag)) == 4
    assert netco(["testbed", "status", *common, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["up"] and st["healthy"] and st["switches"]["tor"]["grpc_open"]
    assert set(st["hosts"]) == {"h1", "h2", "h3", "h4"}
    assert netco(["testbed", "up", *common]) == 2  # already up: refused, nothing touched
    assert "already up" in capsys.readouterr().err
    assert len(_ours(tag)) == 4
    assert netco(["testbed", "down", *common, "--json"]) == 0
    down = json.loads(capsys.readouterr().out)
    assert sorted(down["removed"]["nodes"]) == ["h1", "h2", "h3", "h4", "tor"]
    assert _ours(tag) == [] and not state.exists()
    assert netco(["testbed", "status", *common]) == 1


def test_down_after_supervisor_crash(rack, tmp_path, capsys):
    common, state = rack
    tag = f"k{os.getpid() % 1000}"
    assert netco(["testbed", "up", *common, "--tag", tag, "--target", "softswitch",
                  "--no-apply"]) == 0
    capsys.readouterr()
    st = json.loads(state.read_text())
    switch_pid = st["report"]["switches"]["tor"]["pid"]
    os.kill(st["pid"], signal.SIGKILL)
    end = time.monotonic() + 10
    while Path(f"/proc/{switch_pid}").exists() and time.monotonic() < end:
        time.sleep(0.1)  # the switch follows its parent (PR_SET_PDEATHSIG)
    assert not Path(f"/proc/{switch_pid}").exists()
    assert netco(["testbed", "status", *common]) == 1
    assert "supervisor not running" in capsys.readouterr().out
    assert netco(["testbed", "down", *common]) == 0
    assert _ours(tag) == [] and not state.exists()
