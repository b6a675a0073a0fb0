"""Which switch program a testbed runs, and how a switch node starts it.

``bmv2``: ``simple_switch_grpc`` (BMv2) with the compiled program ``p4/build/netco.json``
pushed by the controller; ``softswitch``: netco's software target (``netco switch``,
:mod:`host.softswitch`) with AF_PACKET ports. ``auto`` takes BMv2 when both the binary is on
PATH and the program is built, else the software target, and says why.

The switch nodes live in the root namespace (their P4Runtime servers on 127.0.0.1 are then
reachable by the controller), so :class:`ProcessSwitch` never deletes interfaces by name
pattern as Mininet's ``Switch.stop`` would (a switch called ``l`` would match ``lo``): the
links it belongs to remove their own veth pairs.
"""

from __future__ import annotations

import ctypes
import logging
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from control_plane.config import DEFAULT_BMV2_JSON
from control_plane.testbed.plan import SwitchPlan
from host import processes
from host.paths import REPO

log = logging.getLogger(__name__)

TARGETS = ("auto", "softswitch", "bmv2")
PR_SET_PDEATHSIG = 1


class TestbedError(RuntimeError):
    """The testbed could not be built or is not what was asked for."""

    __test__ = False  # not a pytest test class


@dataclass(frozen=True)
class TargetChoice:
    target: str   # "softswitch" or "bmv2"
    reason: str


def choose_target(requested: str, bmv2_json: Path = DEFAULT_BMV2_JSON,
                  flag: str = "--target") -> TargetChoice:
    """Resolve ``requested`` (auto/softswitch/bmv2) to the program the switches run.

    ``flag`` is the option the caller's users choose the target with (named in the advice).

    Raises
    ------
    TestbedError
        ``bmv2`` requested but ``simple_switch_grpc`` is not on PATH or the program is not built.
    """
    if requested not in TARGETS:
        raise TestbedError(f"target {requested!r}: use one of {', '.join(TARGETS)}")
    exe = shutil.which("simple_switch_grpc")
    built = Path(bmv2_json).exists()
    if requested == "softswitch":
        return TargetChoice("softswitch", "requested")
    if requested == "bmv2":
        if exe is None:
            raise TestbedError("target bmv2: simple_switch_grpc is not on PATH; install BMv2 or use "
                               f"{flag} softswitch")
        if not built:
            raise TestbedError(f"target bmv2: {bmv2_json} missing; build the P4 program "
                               f"(netco p4 build) or use {flag} softswitch")
        return TargetChoice("bmv2", f"requested ({exe})")
    if exe is None:
        return TargetChoice("softswitch", "auto: simple_switch_grpc not on PATH")
    if not built:
        return TargetChoice("softswitch", f"auto: BMv2 present but {bmv2_json.name} not built")
    return TargetChoice("bmv2", f"auto: {exe} on PATH")


def switch_command(target: str, sw: SwitchPlan, python: str = sys.executable,
                   thrift_port: int | None = None) -> list[str]:
    """Command line of ``sw``'s switch process."""
    if target == "softswitch":
        netco = Path(python).parent / "netco"
        cmd = [str(netco)] if netco.exists() else [python, "-m", "control_plane.cli.main"]
        cmd += ["switch", "--grpc", sw.grpc, "--device-id", str(sw.device_id)]
        for port, ifname in sw.ports:
            cmd += ["--port", f"{port}=afpacket:{ifname}"]
        return cmd
    if target == "bmv2":
        exe = shutil.which("simple_switch_grpc") or "simple_switch_grpc"
        cmd = [exe, "--device-id", str(sw.device_id), "-L", "off", "--no-p4"]
        if thrift_port is not None:
            cmd += ["--thrift-port", str(thrift_port)]
        for port, ifname in sw.ports:
            cmd += ["-i", f"{port}@{ifname}"]
        return [*cmd, "--", "--grpc-server-addr", sw.grpc]
    raise TestbedError(f"target {target!r}: not a switch program")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    ctypes.CDLL("libc.so.6").prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(cmd: list[str], log_path: Path, ns_pid: int | None = None) -> subprocess.Popen:
    """Start ``cmd`` (inside the namespaces of process ``ns_pid`` when given, via mnexec),
    output to ``log_path``; the process gets SIGTERM if the testbed process dies."""
    if ns_pid is not None:
        cmd = ["mnexec", "-a", str(ns_pid), *cmd]
    with open(log_path, "w") as logf:
        return subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=REPO, preexec_fn=_die_with_parent)


def stop_process(proc: subprocess.Popen | None, grace: float = 5.0) -> None:
    """SIGTERM a process we started (by its PID), SIGKILL after ``grace`` seconds."""
    processes.stop_process(proc, grace, reap=grace)


def switch_class():
    """Mininet ``Switch`` subclass running one switch process (imports Mininet)."""
    from mininet.node import Switch

    class ProcessSwitch(Switch):
        """A Mininet switch node whose data plane is an external process (BMv2 or netco)."""

        def __init__(self, name: str, command: list[str] | None = None, log_path: str = "",
                     **params) -> None:
            params["inNamespace"] = False  # P4Runtime on 127.0.0.1 of the root namespace
            super().__init__(name, **params)
            self.command = command or []
            self.log_path = Path(log_path)
            self.proc: subprocess.Popen | None = None

        def start(self, controllers) -> None:
            log.info("switch %s: %s", self.name, " ".join(self.command))
            self.proc = spawn(self.command, self.log_path)

        def stop(self, deleteIntfs: bool = False) -> None:
            stop_process(self.proc)

    return ProcessSwitch
