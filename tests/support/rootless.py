"""Run a command as an unprivileged user (``setpriv``) with this venv's packages.

On the reference machine the venv's interpreter lives under ``/root``, which uid 65534 cannot
enter; :func:`python_for` finds an interpreter of the same version that the user can run (inside
a user namespace, as the namespace rack runs it) and the ``PYTHONPATH`` that gives it the
venv's packages and the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def python_for(uid: int) -> tuple[list[str], dict] | None:
    """A Python interpreter ``uid`` can run, with this venv's packages on its path."""
    paths = [str(REPO), *dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp",
           "PYTHONPATH": os.pathsep.join(paths)}
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for cand in dict.fromkeys([sys.executable, os.path.realpath(sys.executable),
                               shutil.which(ver) or "", f"/usr/bin/{ver}"]):
        if not cand:
            continue
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", cand]
        # as the rack will run it: inside a user namespace
        probe = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "unshare",
                 "--user", "--map-root-user", cand, "-c", "import torch, numpy, host, control_plane"]
        res = subprocess.run(probe, env=env, capture_output=True, timeout=120)
        if res.returncode == 0:
            return cmd, env
    return None


def namespaces_missing() -> str | None:
    """Why a private network namespace cannot be made here (root or unprivileged user
    namespaces, and ``unshare``), or None: the skip reason of every namespace-rack test."""
    from control_plane.testbed.isolate import IsolationError, check_available

    try:
        check_available()
    except IsolationError as exc:
        return str(exc)
    return None


def nsenter_missing() -> str | None:
    """Why a process cannot be started in a rack's host namespace (``nsenter``), or None."""
    if shutil.which("nsenter") is None:
        return "nsenter not on PATH (apt-get install util-linux)"
    return namespaces_missing()


#: Skips a test that builds a namespace rack where namespaces cannot be made, saying why.
needs_namespaces = pytest.mark.skipif(namespaces_missing() is not None,
                                      reason=f"{namespaces_missing()}")

#: Skips a test that starts processes inside a rack's host namespaces (``nsenter``).
needs_nsenter = pytest.mark.skipif(nsenter_missing() is not None, reason=f"{nsenter_missing()}")
