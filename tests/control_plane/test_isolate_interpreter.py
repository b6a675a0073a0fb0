"""An interpreter that cannot run inside the user namespace: one line, and the demo falls back.

A venv whose Python lives where the user cannot go (root's pyenv under /root, mode 0700) works
for a process that may pass there (e.g. CAP_DAC_OVERRIDE, ambient), but not inside the user
namespace the rootless rack is built in: ``unshare`` exits 126. The isolation check tries the
interpreter there first and says why in one line; ``netco demo`` then runs on loopback with
``time_basis: "emulated"`` instead of ending in a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from control_plane.testbed import isolate
from host.paths import REPO
from tests.support.rootless import needs_namespaces

#: The unprivileged user of the CLI test (nobody: exists on every Debian machine).
UID = 65534


@needs_namespaces
def test_an_interpreter_that_cannot_run_there_is_named_in_one_line(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o644)   # no execute bit: not even root may run it
    with pytest.raises(isolate.IsolationError) as ei:
        isolate.check_available(str(fake))
    msg = str(ei.value)
    assert "\n" not in msg
    assert f"{fake} is not executable by uid {os.getuid()}" in msg and "(exit 126)" in msg
    assert f"{fake} is mode 0644" in msg
    isolate.check_available(sys.executable)   # and this process's own one passes


@needs_namespaces
def test_an_interpreter_that_cannot_import_the_job_is_named(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named control_plane' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    with pytest.raises(isolate.IsolationError, match=r"cannot start the job inside .*\(exit 1\): "
                                                     r"ModuleNotFoundError: No module named"):
        isolate.check_available(str(fake))


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.tools("setpriv", "unshare")
def test_demo_falls_back_to_loopback_when_the_interpreter_cannot_run_in_the_namespace():
    """``netco demo`` as an unprivileged user whose interpreter sits in a mode-0700 folder of
    root's: one line naming the interpreter, uid and folder, then the loopback run with the
    time labelled emulated (was: ``IsolationError ... exited 126`` and a traceback)."""
    # not under pytest's tmp_path: /tmp/pytest-of-root is itself mode 0700
    with tempfile.TemporaryDirectory(prefix="netco-interp-test-") as tmp:
        tmp_path = Path(tmp)
        tmp_path.chmod(0o755)
        # uid/gid UID, no groups, but CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH as ambient
        # capabilities: it may run a Python from a folder only root may enter, as long as it
        # is not inside a user namespace
        caps = "+dac_override,+dac_read_search"
        as_user = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups",
                   f"--inh-caps={caps}", f"--ambient-caps={caps}"]
        private = tmp_path / "root-only"
        private.mkdir(mode=0o700)
        python = private / "python"
        python.symlink_to(os.path.realpath(sys.executable))
        work = tmp_path / "work"
        work.mkdir()
        work.chmod(0o777)   # the user writes its report here
        # the venv's packages and the repository, for the base interpreter the symlink names
        paths = [str(REPO), *dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(work),
               "PYTHONPATH": os.pathsep.join(paths)}
        probe = subprocess.run([*as_user, str(python), "-c", "import os, torch; "
                                "print(os.geteuid())"], env=env, capture_output=True, text=True,
                               timeout=120)
        if probe.returncode != 0 or probe.stdout.strip() != str(UID):
            pytest.skip(f"cannot run {python} as uid {UID} with ambient capabilities here "
                        f"({(probe.stderr.strip().splitlines() or ['?'])[-1]})")
        userns = subprocess.run(["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups",
                                 "unshare", "--user", "--map-root-user", "true"], capture_output=True)
        if userns.returncode != 0:
            pytest.skip(f"uid {UID} cannot make user namespaces here (the fallback this tests is the "
                        "one for an unusable interpreter)")
        argv = ["-m", "control_plane.cli.main", "demo", "--task", "digits", "--workers", "2",
                "--steps", "2", "--json", "--no-progress", "--out", "r.json", "--plot", "r.png"]
        res = subprocess.run([*as_user, str(python), *argv], env=env, cwd=work,
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        assert "Traceback" not in res.stderr, res.stderr[-2000:]
        lines = [ln for ln in res.stderr.splitlines() if "no namespace rack here" in ln]
        assert len(lines) == 1, res.stderr[-2000:]
        line = lines[0]
        assert f"{python} -> " in line and f"not executable by uid {UID} inside the user namespace" in line
        assert f"(exit 126): its directory {private} is mode 0700 (owner root)" in line
        assert "falling back to loopback (--testbed loopback)" in line and "EMULATED" in line
        rep = json.loads((work / "r.json").read_text())
        assert rep["testbed"] == "loopback" and rep["time_basis"] == "emulated"
        assert {s["time_basis"] for s in rep["summary"].values()} == {"emulated"}
        assert Path(work / "r.png").stat().st_size > 0
