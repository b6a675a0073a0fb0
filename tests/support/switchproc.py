"""A software switch process on fixed UDP ports, restartable, and the ``netco`` command line
the way a user runs it: what the attach and controller tests share (no root)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from host.paths import REPO
from host.softswitch.launch import UdpSwitch

#: A software switch process on fixed UDP ports, restartable (the library's).
Switch = UdpSwitch


def job_config(path: Path, sw: Switch, members: int = 2, job: dict | None = None) -> Path:
    """The README's network: switch s1 with a UDP port per host, hosts h1, h2, ... on
    127.0.0.11, .12, ... (port r + 1), job ``demo`` (id 1) over ``members`` of them; ``job``
    adds job fields."""
    hosts = [f"h{r + 1}" for r in range(len(sw.ports))]
    cfg = {
        "switches": [{"name": "s1", "address": sw.address, "addr": "10.0.0.254",
                      "target": "softswitch", "coords_per_packet": sw.coords,
                      "udp": {n: f"127.0.0.1:{p}" for n, p in sw.ports.items()}}],
        "hosts": [{"name": h, "ip": f"127.0.0.{11 + r}", "attach": f"s1:{r + 1}"}
                  for r, h in enumerate(hosts)],
        "jobs": [{"name": "demo", "id": 1, "members": hosts[:members], **(job or {})}],
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def netco(*args: str) -> list[str]:
    """The ``netco`` command line (the venv's console script, else the module)."""
    exe = Path(sys.executable).with_name("netco")
    if exe.exists():
        return [str(exe), *args]
    return [sys.executable, "-c", "import sys; from control_plane.cli.main import main; "
                                  "sys.exit(main())", *args]


def run_netco(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``netco ARGS`` as a user would; returns the finished process (text output)."""
    return subprocess.run(netco(*args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=REPO)
