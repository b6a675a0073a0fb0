"""Start a software switch process and drive it over P4Runtime from synchronous code.

The pieces a program needs to run ``python -m host.softswitch`` next to itself: free
loopback ports (:func:`free_udp_port`, :func:`free_tcp_port`), the P4Info to push
(:func:`p4info_path`), the process (:func:`start_switch_process`, :func:`stop_process`) and a
finsy client on an asyncio loop in a thread (:class:`AsyncLoop`, :func:`connect`).
Everything that starts a switch process uses them: the embedded network
(:mod:`control_plane.embedded`), ``benchmarks/softswitch.py`` and the tests (through
``tests/support/aggnet.py`` or directly).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import finsy as fy

from host.paths import REPO
from host.processes import stop_process
from host.softswitch.p4info import COMPILED_P4INFO, netco_p4info, write_p4info

__all__ = ["AsyncLoop", "UdpSwitch", "connect", "free_port", "free_tcp_port", "free_udp_port",
           "p4info_path", "spawn_process", "start_switch_process", "stop_process",
           "switch_command", "wait_listening"]


_HANDED_OUT: set[int] = set()


def free_udp_port(also: Iterable[str] = ()) -> int:
    """An unused UDP port on 127.0.0.1, never one this process handed out before.

    A port is free only while nobody binds it: after the probe socket closes the kernel may
    return the same number to the next probe, so two ends of one tunnel could get one port.

    Parameters
    ----------
    also : iterable of str
        More addresses the port must be free on (a job's ``worker_port`` is bound on every
        member's address); an address this network namespace does not have is not checked.
    """
    also = list(also)
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT and all(_udp_free(ip, port) for ip in also):
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no unused UDP port found")


def _udp_free(ip: str, port: int) -> bool:
    """Whether UDP ``ip:port`` can be bound here (True where ``ip`` is not local)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((ip, port))
        except OSError as exc:
            return exc.errno == errno.EADDRNOTAVAIL
    return True


def free_tcp_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AsyncLoop:
    """An asyncio loop in a daemon thread, for finsy's async API from synchronous code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60.0):
        """Run ``coro`` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        """Stop the loop thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def p4info_path(workdir: Path) -> Path:
    """The compiled P4Info, else the fallback written into ``workdir``."""
    if COMPILED_P4INFO.exists():
        return COMPILED_P4INFO
    return write_p4info(netco_p4info(), workdir / "netco.p4info.txtpb")


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    """An unused port on 127.0.0.1: UDP (:func:`free_udp_port`) or, with ``SOCK_STREAM``, TCP."""
    return free_tcp_port() if kind == socket.SOCK_STREAM else free_udp_port()


def switch_command(ports: Mapping[int, str] | Iterable[str], grpc_port: int,
                   extra: Iterable[str] = (), netns: str | None = None) -> list[str]:
    """The ``python -m host.softswitch`` command line.

    ``ports`` maps port numbers to ``--port`` specs (``{1: "udp:127.0.0.1:47001"}``) or lists
    whole ``--port`` values (``["1=udp:127.0.0.1:47001"]``); ``netns`` runs it in that
    network namespace (``ip netns exec``).
    """
    args = [sys.executable, "-m", "host.softswitch", "--grpc", f"127.0.0.1:{grpc_port}", *extra]
    specs = ([f"{p}={spec}" for p, spec in sorted(ports.items())] if isinstance(ports, Mapping)
             else list(ports))
    for spec in specs:
        args += ["--port", spec]
    return ["ip", "netns", "exec", netns, *args] if netns else args


def spawn_process(args: list[str], log_path: Path) -> subprocess.Popen:
    """Start ``args`` from the repository root, output appended to ``log_path``; no waiting.

    The child imports this checkout's packages (``PYTHONPATH``), installed or not.
    """
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    with open(log_path, "a") as logf:
        return subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO, env=env)


def wait_listening(proc: subprocess.Popen, tcp_port: int, log_path: Path, timeout: float = 30.0,
                   what: str = "software switch") -> None:
    """Wait until ``proc`` accepts TCP connections on 127.0.0.1:``tcp_port``.

    Raises
    ------
    RuntimeError
        The process exited first (the tail of its log in the message), or the port stayed
        closed for ``timeout`` seconds (the process is stopped then).
    """
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: "
                               f"{Path(log_path).read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", tcp_port)) == 0:
                return
        time.sleep(0.05)
    stop_process(proc)
    raise RuntimeError(f"{what}: 127.0.0.1:{tcp_port} not open after {timeout:g} s")


def start_switch_process(ports: Mapping[int, str] | Iterable[str], grpc_port: int, log_path: Path,
                         extra: Iterable[str] = (), netns: str | None = None,
                         timeout: float = 30.0) -> subprocess.Popen:
    """Start ``python -m host.softswitch`` and wait until its P4Runtime port accepts.

    The one way programs and tests start a software switch process: the command from
    :func:`switch_command`, started by :func:`spawn_process`, awaited by :func:`wait_listening`
    (a program starting several switches spawns them all first and waits after).
    """
    proc = spawn_process(switch_command(ports, grpc_port, extra, netns), log_path)
    wait_listening(proc, grpc_port, log_path, timeout)
    return proc


class UdpSwitch:
    """A software switch process on fixed loopback UDP ports that can crash and come back on
    the same ports and P4Runtime address (an operator's restart: it starts empty).

    Parameters
    ----------
    workdir : Path
        Where its log goes (``switch.log``).
    ports : dict or int
        Switch port -> UDP port on 127.0.0.1, or how many ports (1..N, free UDP ports).
    coords : int
        ``--coords-per-packet``.
    extra : sequence of str
        More ``netco switch`` options (e.g. ``--no-c-loop``).
    """

    def __init__(self, workdir: Path, ports: dict[int, int] | int, coords: int = 256,
                 extra: Iterable[str] = ()) -> None:
        self.workdir = Path(workdir)
        self.extra = list(extra)
        self.ports = ports if isinstance(ports, dict) else \
            {n: free_udp_port() for n in range(1, ports + 1)}
        self.coords = coords
        self.grpc = free_tcp_port()
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        """Its P4Runtime address."""
        return f"127.0.0.1:{self.grpc}"

    def start(self) -> UdpSwitch:
        """Start it (empty) and wait until its P4Runtime port accepts."""
        specs = [f"{n}=udp:127.0.0.1:{p}" for n, p in self.ports.items()]
        log = self.workdir / "switch.log"
        self.proc = spawn_process(switch_command(specs, self.grpc, ["--coords-per-packet",
                                                                    str(self.coords),
                                                                    *self.extra]), log)
        wait_listening(self.proc, self.grpc, log)
        return self

    def kill(self) -> None:
        """SIGKILL (a crash: every entry and sum lost) and wait for it."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        """Terminate it (by PID)."""
        stop_process(self.proc)


def connect(loop: AsyncLoop, name: str, grpc_port: int, p4info: Path) -> fy.Switch:
    """A finsy client that became primary and pushed the pipeline."""
    opts = fy.SwitchOptions(p4info=p4info, p4blob=b"", device_id=1)
    client = fy.Switch(name, f"127.0.0.1:{grpc_port}", opts)
    loop.run(client.__aenter__(), timeout=60)
    return client
