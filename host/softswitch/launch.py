"""Start a software switch process and drive it over P4Runtime from synchronous code.

The pieces a program needs to run ``python -m host.softswitch`` next to itself: free
loopback ports (:func:`free_udp_port`, :func:`free_tcp_port`), the P4Info to push
(:func:`p4info_path`), the process (:func:`start_switch_process`, :func:`stop_process`) and a
finsy client on an asyncio loop in a thread (:class:`AsyncLoop`, :func:`connect`).
``benchmarks/softswitch.py`` and the test harness (``tests/support/aggnet.py``) use them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import finsy as fy

from host.softswitch.p4info import COMPILED_P4INFO, netco_p4info, write_p4info

REPO = Path(__file__).resolve().parents[2]

__all__ = ["AsyncLoop", "connect", "free_tcp_port", "free_udp_port", "p4info_path",
           "start_switch_process", "stop_process"]


_HANDED_OUT: set[int] = set()


def free_udp_port() -> int:
    """An unused UDP port on 127.0.0.1, never one this process handed out before.

    A port is free only while nobody binds it: after the probe socket closes the kernel may
    return the same number to the next probe, so two ends of one tunnel could get one port.
    """
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no unused UDP port found")


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


def start_switch_process(ports: dict[int, str], grpc_port: int, log_path: Path,
                         extra: tuple[str, ...] = (), netns: str | None = None) -> subprocess.Popen:
    """Start ``python -m host.softswitch`` and wait until its P4Runtime port accepts."""
    args = [sys.executable, "-m", "host.softswitch", "--grpc", f"127.0.0.1:{grpc_port}", *extra]
    for p, spec in sorted(ports.items()):
        args += ["--port", f"{p}={spec}"]
    if netns:
        args = ["ip", "netns", "exec", netns, *args]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"software switch exited with {proc.returncode}: "
                               f"{log_path.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", grpc_port)) == 0:
                return proc
        time.sleep(0.05)
    stop_process(proc)
    raise RuntimeError(f"software switch: P4Runtime port {grpc_port} not open after 30 s")


def stop_process(proc: subprocess.Popen | None) -> None:
    """Terminate a process we started (by its PID), killing it after 5 s."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def connect(loop: AsyncLoop, name: str, grpc_port: int, p4info: Path) -> fy.Switch:
    """A finsy client that became primary and pushed the pipeline."""
    opts = fy.SwitchOptions(p4info=p4info, p4blob=b"", device_id=1)
    client = fy.Switch(name, f"127.0.0.1:{grpc_port}", opts)
    loop.run(client.__aenter__(), timeout=60)
    return client
