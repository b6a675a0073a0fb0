"""The software target as an aggregation network for the packet suite in ``tests/p4``.

:class:`SoftswitchNetwork` implements the interface of ``tests/p4/switch_fixture.py``
(``AggregationNetwork``: switches, hosts on switch ports, links, job installation, raw frame
I/O at hosts, drop counters) with one ``python -m host.softswitch`` process per switch, so
the same test cases run against BMv2 and against this target. Two wirings:

``tunnel`` (default, no root)
    every host and every switch-to-switch link is a pair of UDP sockets on 127.0.0.1 carrying
    whole Ethernet frames (:class:`~host.softswitch.netio.TunnelPort`).
``afpacket`` (root)
    veth pairs with the host ends in network namespaces, the switch ends read with AF_PACKET,
    like the BMv2 target. Every name starts with the prefix and is removed in :meth:`stop`.

The controller side is finsy (the client the netco controller uses): the P4Info is pushed
with SetForwardingPipelineConfig and entries are written over P4Runtime. The caller passes
``entries(job)`` (the suite's ``job_entries``) so that this module does not import tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import finsy as fy

from host.netns import in_netns
from host.softswitch.p4info import COMPILED_P4INFO, netco_p4info, write_p4info

REPO = Path(__file__).resolve().parents[2]
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


@dataclass(frozen=True)
class Host:
    """A host attached to ``switch`` at ``port`` (same fields as the suite's ``Host``)."""

    name: str
    switch: str
    port: int
    mac: str
    ip: str


@dataclass
class _Switch:
    name: str
    num: int
    ports: dict[int, str] = field(default_factory=dict)   # port -> spec for --port
    proc: subprocess.Popen | None = None
    grpc_port: int = 0
    client: Any = None
    log_path: Path | None = None


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


def run_cmd(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    """Run ``cmd``; raise with its stderr when it fails and ``check``."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return proc


class SoftswitchNetwork:
    """Software switches wired by UDP tunnels (no root) or veth pairs (root).

    Parameters
    ----------
    workdir : Path
        Logs and the fallback P4Info go here.
    entries : callable
        ``entries(job) -> list`` of finsy entities (the suite's ``job_entries``).
    wiring : str
        ``"tunnel"`` or ``"afpacket"``.
    prefix : str
        Prefix of interface and namespace names (afpacket wiring).
    """

    #: widest lanes produced from DATA: all of them (BMv2's 512-byte headroom does not apply)
    max_data_lane_bits = 32

    def __init__(self, workdir: Path, entries: Callable[[Any], list], wiring: str = "tunnel",
                 prefix: str | None = None) -> None:
        if wiring not in ("tunnel", "afpacket"):
            raise ValueError(f"SoftswitchNetwork.wiring: {wiring!r} is not 'tunnel' or 'afpacket'")
        self.workdir = Path(workdir)
        self.entries = entries
        self.wiring = wiring
        self.prefix = prefix or f"ncs{os.getpid() % 100000}"
        self.switches: dict[str, _Switch] = {}
        self.hosts: dict[str, Host] = {}
        self._socks: dict[str, socket.socket] = {}
        self._host_end: dict[str, tuple[str, str]] = {}   # host -> (own end, peer spec)
        self._links: list[tuple[str, str]] = []
        self._netns: list[str] = []
        self._veths: list[str] = []
        self._loop: AsyncLoop | None = None
        self.p4info: Path | None = None

    # -- topology -------------------------------------------------------------------------
    def add_switch(self, name: str) -> None:
        self.switches[name] = _Switch(name, len(self.switches))

    def _next_port(self, sw: _Switch) -> int:
        return max(sw.ports, default=0) + 1

    def _tunnel_pair(self) -> tuple[int, int]:
        return free_udp_port(), free_udp_port()

    def add_host(self, name: str, switch: str) -> Host:
        sw = self.switches[switch]
        port = self._next_port(sw)
        hnum = len(self.hosts)
        host = Host(name, switch, port, mac=f"02:00:00:00:{sw.num:02x}:{port:02x}",
                    ip=f"10.{sw.num}.0.{port}")
        if self.wiring == "tunnel":
            a, b = self._tunnel_pair()
            sw.ports[port] = f"tunnel:127.0.0.1:{a},peer=127.0.0.1:{b}"
            self._host_end[name] = (f"127.0.0.1:{b}", f"127.0.0.1:{a}")
        else:
            sif = f"{self.prefix}s{sw.num}p{port}"
            sw.ports[port] = f"afpacket:{sif}"
            self._host_end[name] = (f"{self.prefix}h{hnum}", sif)
        self.hosts[name] = host
        return host

    def link(self, a: str, b: str) -> tuple[int, int]:
        sa, sb = self.switches[a], self.switches[b]
        pa, pb = self._next_port(sa), self._next_port(sb)
        if self.wiring == "tunnel":
            ua, ub = self._tunnel_pair()
            sa.ports[pa] = f"tunnel:127.0.0.1:{ua},peer=127.0.0.1:{ub}"
            sb.ports[pb] = f"tunnel:127.0.0.1:{ub},peer=127.0.0.1:{ua}"
        else:
            ia, ib = f"{self.prefix}s{sa.num}p{pa}", f"{self.prefix}s{sb.num}p{pb}"
            sa.ports[pa], sb.ports[pb] = f"afpacket:{ia}", f"afpacket:{ib}"
            self._links.append((ia, ib))
        return pa, pb

    def switch_ip(self, switch: str) -> str:
        return f"10.{self.switches[switch].num}.0.254"

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.p4info = p4info_path(self.workdir)
        try:
            if self.wiring == "tunnel":
                for name, (own, _peer) in self._host_end.items():
                    self._socks[name] = self._tunnel_socket(own, self._host_end[name][1])
            else:
                self._start_veths()
            self._loop = AsyncLoop()
            for sw in self.switches.values():
                self._start_switch(sw)
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _tunnel_socket(own: str, peer: str) -> socket.socket:
        h, p = own.rsplit(":", 1)
        ph, pp = peer.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        s.bind((h, int(p)))
        s.connect((ph, int(pp)))
        return s

    def _start_veths(self) -> None:
        for i, (name, (hif, sif)) in enumerate(self._host_end.items()):
            host = self.hosts[name]
            ns = f"{self.prefix}-h{i}"
            run_cmd(["ip", "netns", "add", ns])
            self._netns.append(ns)
            run_cmd(["ip", "link", "add", sif, "type", "veth", "peer", "name", hif])
            self._veths.append(sif)
            run_cmd(["ip", "link", "set", hif, "netns", ns])
            run_cmd(["sysctl", "-qw", f"net.ipv6.conf.{sif}.disable_ipv6=1"], check=False)
            run_cmd(["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{hif}.disable_ipv6=1"],
                 check=False)
            run_cmd(["ip", "-n", ns, "link", "set", hif, "address", host.mac])
            run_cmd(["ip", "-n", ns, "link", "set", hif, "up"])
            run_cmd(["ip", "link", "set", sif, "up"])
            self._socks[name] = in_netns(ns, lambda hif=hif: self._packet_socket(hif))
        for a, b in self._links:
            run_cmd(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
            self._veths.append(a)
            for x in (a, b):
                run_cmd(["sysctl", "-qw", f"net.ipv6.conf.{x}.disable_ipv6=1"], check=False)
                run_cmd(["ip", "link", "set", x, "up"])

    @staticmethod
    def _packet_socket(ifname: str) -> socket.socket:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((ifname, 0))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        return s

    def _start_switch(self, sw: _Switch) -> None:
        assert self._loop is not None and self.p4info is not None
        sw.grpc_port = free_tcp_port()
        sw.log_path = self.workdir / f"softswitch-{sw.name}.log"
        sw.proc = start_switch_process(sw.ports, sw.grpc_port, sw.log_path)
        sw.client = connect(self._loop, sw.name, sw.grpc_port, self.p4info)

    def restart_switch(self, switch: str) -> None:
        """Kill ``switch``'s process and start a fresh one on the same ports (empty state)."""
        sw = self.switches[switch]
        if sw.client is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.run(sw.client.__aexit__(None, None, None), timeout=10)
            sw.client = None
        stop_process(sw.proc)
        self._start_switch(sw)

    def stop(self) -> None:
        for s in self._socks.values():
            s.close()
        self._socks.clear()
        for sw in self.switches.values():
            if sw.client is not None and self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.run(sw.client.__aexit__(None, None, None), timeout=10)
                sw.client = None
            stop_process(sw.proc)
            sw.proc = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        for ifname in self._veths:
            if Path(f"/sys/class/net/{ifname}").exists():
                run_cmd(["ip", "link", "del", ifname], check=False)
        for ns in self._netns:
            run_cmd(["ip", "netns", "del", ns], check=False)
        self._veths.clear()
        self._netns.clear()

    # -- control --------------------------------------------------------------------------
    def client(self, switch: str) -> fy.Switch:
        """The finsy client of ``switch``."""
        c = self.switches[switch].client
        if c is None or self._loop is None:
            raise RuntimeError(f"switch {switch} not started")
        return c

    def run(self, coro, timeout: float = 60.0):
        """Run a coroutine on the control loop (finsy calls)."""
        assert self._loop is not None
        return self._loop.run(coro, timeout)

    def install_job(self, switch: str, job) -> None:
        self.run(self.client(switch).insert(self.entries(job)))

    def add_route(self, switch: str, prefix: str, port: int, src_mac: str, dst_mac: str) -> None:
        entry = fy.P4TableEntry(
            "ingress.routing.routes", match=fy.P4TableMatch(dst_addr=prefix),
            action=fy.P4TableAction("ingress.routing.route", port=port, src_mac=src_mac,
                                    dst_mac=dst_mac))
        self.run(self.client(switch).insert([entry]))

    def counter(self, switch: str, name: str) -> dict[int, int]:
        """All cells of counter ``name`` (read over P4Runtime)."""
        client = self.client(switch)

        async def read() -> dict[int, int]:
            out = {}
            async for e in client.read(fy.P4CounterEntry(name)):
                out[e.index] = e.packet_count
            return out

        return self.run(read())

    def drop_counts(self, switch: str) -> dict[int, int]:
        return self.counter(switch, "ingress.drops")

    # -- data -----------------------------------------------------------------------------
    def send(self, host: str, frame: bytes) -> None:
        self._socks[host].send(frame)

    def recv(self, host: str, count: int = 1, timeout: float = 2.0) -> list[bytes]:
        s = self._socks[host]
        frames: list[bytes] = []
        end = time.monotonic() + timeout
        while len(frames) < count:
            left = end - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                data, addr = s.recvfrom(65535)
            except TimeoutError:
                break
            if self.wiring == "afpacket" and addr[2] == PACKET_OUTGOING:
                continue
            frames.append(data)
        return frames

    def flush(self, host: str) -> None:
        s = self._socks[host]
        s.setblocking(False)
        try:
            while True:
                s.recv(65535)
        except BlockingIOError:
            pass
        finally:
            s.setblocking(True)


def scratch_dir() -> Path:
    """A fresh temporary directory (for scripts that use the network outside pytest)."""
    return Path(tempfile.mkdtemp(prefix="netco-softswitch-"))
