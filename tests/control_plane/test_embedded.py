"""The embedded default network (``control_plane/embedded.py``): what it starts it stops."""

from __future__ import annotations

import os
import subprocess

import pytest

from control_plane.config.schema import ConfigError
from control_plane.embedded import EmbeddedNetwork, job_width


def test_a_job_the_controller_refuses_leaves_no_switch_running(monkeypatch):
    """More slots than the P4 program's pool: the controller's file is refused after the switch
    process started; ``start`` must stop it (it leaked before: ``__exit__`` never runs)."""
    started: list[subprocess.Popen] = []
    real = subprocess.Popen

    def spy(*a, **kw):
        p = real(*a, **kw)
        started.append(p)
        return p

    monkeypatch.setattr(subprocess, "Popen", spy)
    net = EmbeddedNetwork(2, num_slots=1024)
    with pytest.raises(ConfigError, match="num_slots"):
        net.start()
    assert started, "the switch process was not started through subprocess.Popen"
    for p in started:
        assert p.poll() is not None, f"switch pid {p.pid} still running"
    assert net.proc is None and not os.path.exists(net.workdir)


def test_the_launchers_width_follows_the_lanes():
    assert job_width(2) == 1024            # 2 x 30 fits 8-bit lanes
    assert job_width(9) == 512             # 9 x 30 needs 16 bits
    assert job_width(4, lane_bits=32) == 256
