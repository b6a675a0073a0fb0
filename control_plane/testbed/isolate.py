"""Run a function in a private network and mount namespace, rootless when not root.

A namespace rack (:mod:`control_plane.testbed.nsrack`) is built *inside* such a process: its
network namespace becomes the rack's switch namespace, and the host namespaces it creates are
named (``ip netns``) under a private ``/run/netns`` that nobody else sees. When the process
tree ends, the kernel drops every namespace, veth pair and qdisc it made.

Not root: ``unshare --user --map-root-user --net --mount --pid`` (an unprivileged user
namespace; inside it the caller is uid 0 with capabilities over the namespaces it creates).
Root: the same without ``--user --map-root-user``. The job is the init of its own PID
namespace, so whatever it started (the software target, worker processes) dies with it even
if it is killed outright. The function runs in a fresh interpreter
(``python -m control_plane.testbed.isolate IN OUT``): arguments and result travel as pickles
in a private temporary folder; what the function prints on stderr reaches the caller's stderr.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from host import tools

log = logging.getLogger(__name__)

#: Set in the isolated child: the process is inside its own network and mount namespace.
ENV_MARK = "NETCO_ISOLATED"
REPO = Path(__file__).resolve().parents[2]
#: Where the administration tools the job runs (``tc``, ``sysctl``) live: root's PATH has these
#: folders, an ordinary user's (Debian: /usr/local/bin:/usr/bin:/bin) does not. Inside its
#: namespaces the job is root, so it gets them too.
ADMIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
#: What a job on a namespace rack runs inside its namespaces (found on :func:`admin_path`).
RACK_TOOLS = ("ip", "tc", "sysctl")
#: What the job's interpreter must manage inside the namespaces before anything else: the
#: module :func:`run_isolated` starts (:func:`check_interpreter` tries it).
JOB_MODULE = "control_plane.testbed.isolate"


class IsolationError(RuntimeError):
    """The isolated namespace could not be made (user namespaces unavailable, no ``unshare``)."""


class IsolatedError(RuntimeError):
    """The function raised inside the isolated process; the message is its ``Type: message``."""

    def __init__(self, message: str, error_type: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def is_isolated() -> bool:
    """Whether this process runs inside a namespace made by :func:`run_isolated`."""
    return os.environ.get(ENV_MARK) == "1"


def unshare_command() -> list[str]:
    """The ``unshare`` prefix for this user (``--user --map-root-user`` when not root)."""
    exe = shutil.which("unshare")
    if exe is None:
        raise IsolationError("no 'unshare' on PATH (util-linux): cannot make network namespaces")
    # a PID namespace too, whose init is the job: if it dies, the kernel kills every process
    # in the namespace (switch, workers), and --kill-child kills it if unshare is killed
    cmd = [exe, "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
           "--propagation", "private"]
    if os.geteuid() != 0:
        cmd[1:1] = ["--user", "--map-root-user"]
    return cmd


def check_available(python: str | None = None) -> None:
    """Raise :class:`IsolationError` (one line, with the reason) if an isolated job cannot run
    here: namespaces cannot be made, the rack's tools (:data:`RACK_TOOLS`) are missing, or the
    interpreter ``python`` (default ``sys.executable``) cannot start the job inside them
    (:func:`check_interpreter`)."""
    cmd = [*unshare_command(), "true"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IsolationError(f"cannot run {cmd[0]}: {exc}") from exc
    if res.returncode != 0:
        why = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
        kind = "user namespaces" if os.geteuid() != 0 else "network namespaces"
        raise IsolationError(f"{kind} unavailable ({why}); e.g. sysctl "
                             "kernel.unprivileged_userns_clone=1 or user.max_user_namespaces > 0")
    gone = tools.missing(*RACK_TOOLS, path=admin_path(os.environ.get("PATH", os.defpath)))
    if gone:
        raise IsolationError(f"a namespace rack needs {gone}")
    check_interpreter(python or sys.executable)


def _job_env() -> dict[str, str]:
    """The environment of the isolated job (:func:`run_isolated`)."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, ENV_MARK: "1", "PYTHONPATH": path,
            "PATH": admin_path(os.environ.get("PATH", os.defpath)),
            "NETCO_ROOTLESS": "1" if os.geteuid() != 0 else "0"}


def check_interpreter(python: str) -> None:
    """Raise :class:`IsolationError` (one line) unless ``python`` starts inside fresh
    namespaces, as :func:`run_isolated` will start it, and imports the job's module there.

    The caller may run an interpreter it cannot run in a user namespace: a venv whose Python
    lives under another user's mode-0700 home works outside (e.g. with CAP_DAC_OVERRIDE) and
    exits 126 inside. The line says whose permission fails and where.
    """
    cmd = [*unshare_command(), python, "-c", f"import {JOB_MODULE}"]
    try:
        res = subprocess.run(cmd, env=_job_env(), capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IsolationError(f"cannot run {cmd[0]}: {exc}") from exc
    if res.returncode == 0:
        return
    where = "the user namespace" if os.geteuid() != 0 else "a private namespace"
    shown = python if os.path.realpath(python) == python else f"{python} -> {os.path.realpath(python)}"
    last = (res.stderr.strip().splitlines() or [""])[-1]
    if res.returncode in (126, 127):   # unshare could not execute it
        why = tools.exec_blocked(python) or last or "not executable"
        raise IsolationError(f"{shown} is not executable by uid {os.getuid()} inside {where} "
                             f"(exit {res.returncode}): {why}")
    raise IsolationError(f"{shown} cannot start the job inside {where} (exit {res.returncode}): "
                         f"{last or 'no message'}")


def admin_path(path: str | None) -> str:
    """``path`` (a ``PATH`` value) with the :data:`ADMIN_DIRS` it lacks appended."""
    parts = [p for p in (path or "").split(os.pathsep) if p]
    return os.pathsep.join([*parts, *(d for d in ADMIN_DIRS if d not in parts)])


def _pdeathsig() -> None:
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_isolated(target: str, kwargs: dict | None = None, *, timeout_s: float = 3600.0) -> Any:
    """Call ``module:function(**kwargs)`` in a private network and mount namespace.

    Returns the function's (picklable) value. Raises :class:`IsolationError` when the
    namespaces cannot be made and :class:`IsolatedError` when the function raised.
    """
    if is_isolated():
        return _call(target, kwargs or {})
    check_available()   # why not, in one line (unshare's own complaint would reach stderr)
    prefix = unshare_command()
    with tempfile.TemporaryDirectory(prefix="netco-iso-") as tmp:
        # the mapped root of a user namespace must read and write the exchange files
        os.chmod(tmp, 0o700)
        src, dst = Path(tmp, "in.pkl"), Path(tmp, "out.pkl")
        src.write_bytes(pickle.dumps((target, kwargs or {})))
        env = _job_env()
        cmd = [*prefix, sys.executable, "-m", JOB_MODULE, str(src), str(dst)]
        log.debug("isolated: %s", " ".join(cmd))
        for stream in (sys.stdout, sys.stderr):   # the job writes to the same files
            if stream is not None:
                stream.flush()
        proc = subprocess.Popen(cmd, env=env, preexec_fn=_pdeathsig)
        try:
            rc = proc.wait(timeout_s)
        except BaseException:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            raise
        if not dst.exists():
            if rc != 0 and not src.with_name("started").exists():
                raise IsolationError(f"could not enter a private namespace ({' '.join(prefix)} "
                                     f"exited {rc})")
            raise IsolatedError(f"isolated process exited {rc} without a result", "Crash")
        ok, value = pickle.loads(dst.read_bytes())
    if ok:
        return value
    raise IsolatedError(value[1], value[0])


def _call(target: str, kwargs: dict) -> Any:
    mod, _, name = target.partition(":")
    return getattr(importlib.import_module(mod), name)(**kwargs)


def prepare_namespace() -> None:
    """Inside the fresh namespaces: loopback up and a private, writable ``/run/netns``."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    run = Path("/run/netns")
    try:
        run.mkdir(parents=True, exist_ok=True)
        target = run
    except OSError:  # /run belongs to the real root: cover it (private mount namespace)
        target = Path("/run")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "netco-netns", str(target)],
                   check=True)
    Path("/run/netns").mkdir(exist_ok=True)


def main(argv: list[str]) -> int:
    src, dst = Path(argv[0]), Path(argv[1])
    src.with_name("started").touch()
    target, kwargs = pickle.loads(src.read_bytes())
    try:
        prepare_namespace()
        result = (True, _call(target, kwargs))
    except BaseException as exc:  # reported to the caller
        log.debug("isolated call failed", exc_info=True)
        result = (False, (type(exc).__name__, f"{type(exc).__name__}: {exc}"))
    dst.write_bytes(pickle.dumps(result))
    return 0


if __name__ == "__main__":  # pragma: no cover - runs in the child
    logging.basicConfig(level=os.environ.get("NETCO_ISOLATE_LOG", "WARNING"),
                        format="%(levelname)s %(name)s: %(message)s")
    sys.exit(main(sys.argv[1:]))
