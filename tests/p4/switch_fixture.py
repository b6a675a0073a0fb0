"""Aggregation targets for the packet tests: BMv2 (here) and, later, the software target.

A target is an :class:`AggregationNetwork`: switches, hosts attached to switch ports, links
between switches, job installation, raw frame I/O at the hosts and drop counters. The tests in
``tests/p4`` use nothing else, so another target (the software aggregator) plugs in by
implementing this interface and adding itself to ``TARGETS`` in ``tests/p4/conftest.py``.

:class:`Bmv2Network` starts one ``simple_switch_grpc`` per switch (``--device-id 1``, gRPC on
127.0.0.1, ``-L off``), wires hosts through veth pairs into network namespaces and switches
through veth pairs, pushes ``p4/build/netco.json`` + P4Info over P4Runtime with finsy, and
writes entries built by :func:`job_entries`, the stand-in for the controller's code path.
Everything it creates is named with the prefix ``nct<pid>`` and removed in :meth:`stop`.
"""

from __future__ import annotations

import abc
import contextlib
import ipaddress
import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import finsy as fy

from host.impair.netns import in_netns
from host.protocol import layout as lay
from host.softswitch.testnet import AsyncLoop, free_tcp_port, run_cmd

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
P4_JSON = REPO / "p4" / "build" / "netco.json"
P4_INFO = REPO / "p4" / "build" / "netco.p4info.txtpb"

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4

#: hosts of the single-switch test topology: 8 workers and one host that is nobody's worker
WORKERS = [f"w{i}" for i in range(8)]
INTRUDER = "x"


@dataclass(frozen=True)
class Host:
    """A host (worker) attached to ``switch`` at ``port``."""

    name: str
    switch: str
    port: int
    mac: str
    ip: str


@dataclass
class Worker:
    """A direct contributor of a job at a switch: a worker (rank) or a child switch (id)."""

    rank: int
    port: int
    ip: str
    mac: str = "00:00:00:00:00:00"
    is_switch: bool = False


@dataclass
class SwitchJob:
    """Everything one switch needs to serve one job (what the controller installs)."""

    job_id: int
    index: int
    table: Sequence[int]
    lane_bits: int
    self_ip: str
    contributors: list[Worker]
    members: list[Worker] | None = None  # who receives results (default: contributors)
    slot_base: int = 0
    num_slots: int = 8
    mcast_grp: int | None = None  # default: job index + 1
    parent_port: int | None = None
    parent_ip: str = "0.0.0.0"
    self_id: int = 0

    def __post_init__(self) -> None:
        if len(self.table) != lay.TABLE_ENTRIES:
            raise ValueError(f"SwitchJob.table: need {lay.TABLE_ENTRIES} values")
        if self.lane_bits not in lay.LANE_WIDTHS:
            raise ValueError(f"SwitchJob.lane_bits: {self.lane_bits} not in {lay.LANE_WIDTHS}")


def job_entries(job: SwitchJob) -> list:
    """P4Runtime entities for ``job`` (table names from the P4Info; see docs/protocol.md)."""
    members = job.members if job.members is not None else job.contributors
    grp = job.mcast_grp if job.mcast_grp is not None else job.index + 1
    ents: list = [
        fy.P4MulticastGroupEntry(grp, replicas=[m.port for m in members]),   # named by the job
        fy.P4TableEntry(
            "ingress.thc_validate.jobs",
            match=fy.P4TableMatch(job_id=job.job_id),
            action=fy.P4TableAction(
                "ingress.thc_validate.set_job",
                index=job.index, slot_base=job.slot_base, num_slots=job.num_slots,
                expected=len(job.contributors), lane_bits=job.lane_bits, mcast_grp=grp,
                has_parent=int(job.parent_port is not None),
                parent_port=job.parent_port or 0, parent_addr=job.parent_ip,
                self_addr=job.self_ip, self_id=job.self_id,
            ),
        ),
        fy.P4TableEntry(
            "ingress.thc_load.tables",
            match=fy.P4TableMatch(job_id=job.job_id),
            action=fy.P4TableAction("ingress.thc_load.load_table",
                                    **{f"v{i}": v for i, v in enumerate(job.table)}),
        ),
    ]
    for w in job.contributors:
        ents.append(fy.P4TableEntry(
            "ingress.thc_validate.senders",
            match=fy.P4TableMatch(job_id=job.job_id, rank=w.rank, ingress_port=w.port,
                                  src_addr=w.ip),
            action=fy.P4TableAction("ingress.thc_validate.sender", is_switch=int(w.is_switch)),
        ))
    for m in members:
        ents.append(fy.P4TableEntry(
            "egress.thc_members.members",
            match=fy.P4TableMatch(job_id=job.job_id, egress_port=m.port),
            action=fy.P4TableAction("egress.thc_members.set_member", dst_mac=m.mac,
                                    dst_addr=m.ip),
        ))
    return ents


class AggregationNetwork(abc.ABC):
    """The interface the packet tests use; one implementation per aggregation target."""

    #: widest lanes the target produces from DATA (a wider job's DATA is dropped,
    #: DropReason.LANE_UNSUPPORTED)
    max_data_lane_bits: int = 32

    @abc.abstractmethod
    def add_switch(self, name: str) -> None:
        """Declare a switch (before :meth:`start`)."""

    @abc.abstractmethod
    def add_host(self, name: str, switch: str) -> Host:
        """Attach a host to the next free port of ``switch`` (before :meth:`start`)."""

    @abc.abstractmethod
    def link(self, a: str, b: str) -> tuple[int, int]:
        """Connect switches ``a`` and ``b``; returns (port on a, port on b)."""

    @abc.abstractmethod
    def switch_ip(self, switch: str) -> str:
        """Aggregation address of ``switch`` (source of its results)."""

    @abc.abstractmethod
    def start(self) -> None:
        """Bring everything up with the aggregation program loaded."""

    @abc.abstractmethod
    def install_job(self, switch: str, job: SwitchJob) -> None:
        """Install ``job`` on ``switch`` (controller code path)."""

    @abc.abstractmethod
    def add_route(self, switch: str, prefix: str, port: int, src_mac: str, dst_mac: str) -> None:
        """Install an ordinary IPv4 route."""

    @abc.abstractmethod
    def send(self, host: str, frame: bytes) -> None:
        """Transmit a raw Ethernet frame from ``host``."""

    @abc.abstractmethod
    def recv(self, host: str, count: int = 1, timeout: float = 2.0) -> list[bytes]:
        """Frames received at ``host``: stop after ``count`` or ``timeout`` seconds."""

    @abc.abstractmethod
    def counter(self, switch: str, name: str) -> dict[int, int]:
        """Packet count per index of counter ``name`` (P4Info name, e.g. ``ingress.drops``)."""

    def drop_counts(self, switch: str) -> dict[int, int]:
        """Drop counter per :class:`host.protocol.DropReason` value."""
        return self.counter(switch, "ingress.drops")

    def flush(self, host: str) -> None:
        """Discard frames already queued at ``host``."""
        self.recv(host, count=1 << 20, timeout=0.05)

    @abc.abstractmethod
    def stop(self) -> None:
        """Tear everything down."""


def _wait_tcp(port: int, proc: subprocess.Popen, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} during start")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what}: gRPC port {port} not open after {timeout} s")


@dataclass
class _Switch:
    name: str
    num: int
    ports: dict[int, str] = field(default_factory=dict)  # port -> interface in root ns
    proc: subprocess.Popen | None = None
    grpc_port: int = 0
    client: fy.Switch | None = None
    log_path: Path | None = None


class Bmv2Network(AggregationNetwork):
    """BMv2 ``simple_switch_grpc`` target on veth pairs and network namespaces."""

    #: simple_switch's 512-byte packet headroom (p4/v1model/include/size.p4)
    max_data_lane_bits = 16

    def __init__(self, workdir: Path, prefix: str | None = None) -> None:
        self.prefix = prefix or f"nct{os.getpid() % 100000}"
        self.workdir = workdir
        self.switches: dict[str, _Switch] = {}
        self.hosts: dict[str, Host] = {}
        self._host_ns: dict[str, str] = {}
        self._host_if: dict[str, str] = {}
        self._socks: dict[str, socket.socket] = {}
        self._links: list[tuple[str, str]] = []  # root-ns veth pairs (first end)
        self._netns: list[str] = []
        self._loop: AsyncLoop | None = None

    # -- topology -------------------------------------------------------------------------
    def add_switch(self, name: str) -> None:
        self.switches[name] = _Switch(name, len(self.switches))

    def _next_port(self, sw: _Switch) -> int:
        return max(sw.ports, default=0) + 1

    def add_host(self, name: str, switch: str) -> Host:
        sw = self.switches[switch]
        port = self._next_port(sw)
        hnum = len(self.hosts)
        host = Host(name, switch, port, mac=f"02:00:00:00:{sw.num:02x}:{port:02x}",
                    ip=f"10.{sw.num}.0.{port}")
        sw.ports[port] = f"{self.prefix}s{sw.num}p{port}"
        self._host_if[name] = f"{self.prefix}h{hnum}"
        self._host_ns[name] = f"{self.prefix}-h{hnum}"
        self.hosts[name] = host
        return host

    def link(self, a: str, b: str) -> tuple[int, int]:
        sa, sb = self.switches[a], self.switches[b]
        pa, pb = self._next_port(sa), self._next_port(sb)
        sa.ports[pa] = f"{self.prefix}s{sa.num}p{pa}"
        sb.ports[pb] = f"{self.prefix}s{sb.num}p{pb}"
        self._links.append((sa.ports[pa], sb.ports[pb]))
        return pa, pb

    def switch_ip(self, switch: str) -> str:
        return f"10.{self.switches[switch].num}.0.254"

    # -- lifecycle ------------------------------------------------------------------------
    def _veth(self, a: str, b: str) -> None:
        run_cmd(["ip", "link", "add", a, "type", "veth", "peer", "name", b])

    @staticmethod
    def _quiet(ifname: str, ns: str | None = None) -> None:
        # No IPv6 (no router solicitations or DAD frames that would hit the switch).
        pre = ["ip", "netns", "exec", ns] if ns else []
        run_cmd([*pre, "sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1"], check=False)

    def start(self) -> None:
        if not (P4_JSON.exists() and P4_INFO.exists()):
            raise RuntimeError(f"{P4_JSON} missing: run `make -C p4` with p4c on PATH")
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_links()
            self._start_switches()
        except BaseException:
            self.stop()
            raise

    def _start_links(self) -> None:
        for name, host in self.hosts.items():
            ns, hif = self._host_ns[name], self._host_if[name]
            sif = self.switches[host.switch].ports[host.port]
            run_cmd(["ip", "netns", "add", ns])
            self._netns.append(ns)
            self._veth(sif, hif)
            run_cmd(["ip", "link", "set", hif, "netns", ns])
            self._quiet(sif)
            self._quiet(hif, ns)
            run_cmd(["ip", "-n", ns, "link", "set", hif, "address", host.mac])
            run_cmd(["ip", "-n", ns, "link", "set", hif, "up"])
            run_cmd(["ip", "link", "set", sif, "up"])
            self._socks[name] = in_netns(ns, lambda hif=hif: self._open_socket(hif))
        for a, b in self._links:
            self._veth(a, b)
            for i in (a, b):
                self._quiet(i)
                run_cmd(["ip", "link", "set", i, "up"])

    @staticmethod
    def _open_socket(ifname: str) -> socket.socket:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((ifname, 0))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        return s

    def _start_switches(self) -> None:
        exe = shutil.which("simple_switch_grpc")
        if exe is None:
            raise RuntimeError("simple_switch_grpc not on PATH")
        self._loop = AsyncLoop()
        for sw in self.switches.values():
            sw.grpc_port = free_tcp_port()
            thrift = free_tcp_port()
            ifs = [a for p, i in sorted(sw.ports.items()) for a in ("-i", f"{p}@{i}")]
            sw.log_path = self.workdir / f"{sw.name}.log"
            cmd = [exe, "--device-id", "1", "-L", "off", "--no-p4", "--thrift-port", str(thrift),
                   *ifs, "--", "--grpc-server-addr", f"127.0.0.1:{sw.grpc_port}"]
            with open(sw.log_path, "w") as logf:
                sw.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
            _wait_tcp(sw.grpc_port, sw.proc, 20.0, f"simple_switch_grpc {sw.name}")
        for sw in self.switches.values():
            opts = fy.SwitchOptions(p4info=P4_INFO, p4blob=P4_JSON, device_id=1)
            client = fy.Switch(sw.name, f"127.0.0.1:{sw.grpc_port}", opts)
            self._loop.run(client.__aenter__(), timeout=120)
            sw.client = client

    def stop(self) -> None:
        for s in self._socks.values():
            s.close()
        self._socks.clear()
        for sw in self.switches.values():
            if sw.client is not None and self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.run(sw.client.__aexit__(None, None, None), timeout=10)
                sw.client = None
            if sw.proc is not None and sw.proc.poll() is None:
                sw.proc.terminate()
                try:
                    sw.proc.wait(5)
                except subprocess.TimeoutExpired:
                    sw.proc.kill()
                    sw.proc.wait(5)
            sw.proc = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        for a, _b in self._links:
            run_cmd(["ip", "link", "del", a], check=False)
        for ns in self._netns:
            run_cmd(["ip", "netns", "del", ns], check=False)
        for sw in self.switches.values():
            for ifname in sw.ports.values():
                if Path(f"/sys/class/net/{ifname}").exists():
                    run_cmd(["ip", "link", "del", ifname], check=False)
        self._netns.clear()
        self._links.clear()

    # -- control --------------------------------------------------------------------------
    def _client(self, switch: str) -> fy.Switch:
        client = self.switches[switch].client
        if client is None or self._loop is None:
            raise RuntimeError(f"switch {switch} not started")
        return client

    def install_job(self, switch: str, job: SwitchJob) -> None:
        client = self._client(switch)
        assert self._loop is not None
        self._loop.run(client.insert(job_entries(job)))

    def add_route(self, switch: str, prefix: str, port: int, src_mac: str, dst_mac: str) -> None:
        client = self._client(switch)
        assert self._loop is not None
        entry = fy.P4TableEntry(
            "ingress.routing.routes", match=fy.P4TableMatch(dst_addr=prefix),
            action=fy.P4TableAction("ingress.routing.route", port=port, src_mac=src_mac,
                                    dst_mac=dst_mac))
        self._loop.run(client.insert([entry]))

    def counter(self, switch: str, name: str) -> dict[int, int]:
        client = self._client(switch)
        assert self._loop is not None

        async def read() -> dict[int, int]:
            out = {}
            async for e in client.read(fy.P4CounterEntry(name)):
                out[e.index] = e.packet_count
            return out

        return self._loop.run(read())

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
            if addr[2] != PACKET_OUTGOING:
                frames.append(data)
        return frames

    def flush(self, host: str) -> None:
        """Discard frames already queued at ``host``."""
        s = self._socks[host]
        s.setblocking(False)
        try:
            while True:
                s.recv(65535)
        except BlockingIOError:
            pass
        finally:
            s.setblocking(True)


def ip_int(ip: str) -> int:
    """Dotted quad as an integer."""
    return int(ipaddress.IPv4Address(ip))
