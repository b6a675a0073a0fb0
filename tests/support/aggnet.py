"""One aggregation-network harness for the packet tests: BMv2 and the software target.

An :class:`AggregationNetwork` is switches, hosts attached to switch ports, links between
switches, job installation, raw frame I/O at the hosts and counters. The packet suite in
``tests/p4`` uses nothing else, so every target runs the same cases (``tests/p4/conftest.py``
lists them). The targets:

:class:`Bmv2Network`
    one ``simple_switch_grpc`` per switch (``--device-id 1``, gRPC on 127.0.0.1, ``-L off``),
    the compiled program (``p4/build``, or the folder ``NETCO_TEST_P4BUILD`` names) pushed
    with finsy; needs root, BMv2 and the compiled program.
:class:`SoftswitchNetwork`
    one ``python -m host.softswitch`` process per switch (:mod:`host.softswitch.launch`),
    wired by UDP tunnels on 127.0.0.1 carrying whole Ethernet frames (``tunnel``, no root) or
    by veth pairs read with AF_PACKET like BMv2 (``afpacket``, root).

Both push the P4Info with SetForwardingPipelineConfig and write the entries
:func:`job_entries` builds (the stand-in for the controller's code path) over P4Runtime with
finsy, the client the netco controller uses. With veth wiring, hosts live in network
namespaces; every interface and namespace is named with the network's prefix and removed in
:meth:`AggregationNetwork.stop`.
"""

from __future__ import annotations

import abc
import contextlib
import ipaddress
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import finsy as fy

from host.netns import in_netns
from host.paths import P4_BUILD
from host.protocol import layout as lay
from host.softswitch.launch import (
    AsyncLoop,
    connect,
    free_tcp_port,
    free_udp_port,
    p4info_path,
    spawn_process,
    start_switch_process,
    stop_process,
    wait_listening,
)
from tests.support.token import TOKEN

#: the compiled program BMv2 runs (``NETCO_TEST_P4BUILD`` names another build folder)
P4BUILD = Path(os.environ.get("NETCO_TEST_P4BUILD", P4_BUILD))
P4_JSON = P4BUILD / "netco.json"
P4_INFO = P4BUILD / "netco.p4info.txtpb"

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
    #: the UDP source port its sender binding names (0: any)
    udp_port: int = 0


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
    token: int = TOKEN         # set_job.token: every THC header of the job must carry it

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
                self_addr=job.self_ip, self_id=job.self_id, token=job.token,
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
            action=fy.P4TableAction("ingress.thc_validate.sender", is_switch=int(w.is_switch),
                                    udp_port=w.udp_port),
        ))
    for m in members:
        ents.append(fy.P4TableEntry(
            "egress.thc_members.members",
            match=fy.P4TableMatch(job_id=job.job_id, egress_port=m.port),
            action=fy.P4TableAction("egress.thc_members.set_member", dst_mac=m.mac,
                                    dst_addr=m.ip),
        ))
    return ents


def ip_int(ip: str) -> int:
    """Dotted quad as an integer."""
    return int(ipaddress.IPv4Address(ip))


def run_cmd(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    """Run ``cmd``; raise with its stderr when it fails and ``check``."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return proc


@dataclass
class _Switch:
    name: str
    num: int
    #: port -> root-namespace interface (veth wiring) or ``tunnel:`` spec (tunnel wiring)
    ports: dict[int, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    grpc_port: int = 0
    client: Any = None
    log_path: Path | None = None


class AggregationNetwork(abc.ABC):
    """Switches, hosts and links of one target; the interface the packet tests use.

    Subclasses start the switch processes (:meth:`_start_switch`); everything else (topology,
    wiring, P4Runtime writes and reads, frame I/O at the hosts, teardown) is shared.

    Parameters
    ----------
    workdir : Path
        Logs (and the software target's fallback P4Info) go here.
    prefix : str
        Prefix of interface and namespace names (veth wiring).
    wiring : {"veth", "tunnel"}
        Hosts and switch-to-switch links as veth pairs (hosts in network namespaces, root)
        or as pairs of UDP sockets on 127.0.0.1 carrying whole frames (no root).
    """

    #: widest lanes the target produces from DATA (a wider job's DATA is dropped,
    #: DropReason.LANE_UNSUPPORTED)
    max_data_lane_bits: int = 32

    def __init__(self, workdir: Path, prefix: str, wiring: str = "veth") -> None:
        self.workdir = Path(workdir)
        self.prefix = prefix
        self.wiring = wiring
        self.switches: dict[str, _Switch] = {}
        self.hosts: dict[str, Host] = {}
        self._host_ns: dict[str, str] = {}   # veth: host -> namespace
        self._host_if: dict[str, str] = {}   # veth: host -> interface in its namespace
        self._tunnels: dict[str, tuple[str, str]] = {}   # tunnel: host -> (own, peer) address
        self._socks: dict[str, socket.socket] = {}
        self._links: list[tuple[str, str]] = []   # veth: switch-to-switch pairs
        self._netns: list[str] = []
        self._loop: AsyncLoop | None = None

    # -- topology -------------------------------------------------------------------------
    def add_switch(self, name: str) -> None:
        """Declare a switch (before :meth:`start`)."""
        self.switches[name] = _Switch(name, len(self.switches))

    @staticmethod
    def _next_port(sw: _Switch) -> int:
        return max(sw.ports, default=0) + 1

    def _iface(self, sw: _Switch, port: int) -> str:
        return f"{self.prefix}s{sw.num}p{port}"

    def add_host(self, name: str, switch: str) -> Host:
        """Attach a host to the next free port of ``switch`` (before :meth:`start`)."""
        sw = self.switches[switch]
        port = self._next_port(sw)
        hnum = len(self.hosts)
        host = Host(name, switch, port, mac=f"02:00:00:00:{sw.num:02x}:{port:02x}",
                    ip=f"10.{sw.num}.0.{port}")
        if self.wiring == "tunnel":
            a, b = free_udp_port(), free_udp_port()
            sw.ports[port] = f"tunnel:127.0.0.1:{a},peer=127.0.0.1:{b}"
            self._tunnels[name] = (f"127.0.0.1:{b}", f"127.0.0.1:{a}")
        else:
            sw.ports[port] = self._iface(sw, port)
            self._host_if[name] = f"{self.prefix}h{hnum}"
            self._host_ns[name] = f"{self.prefix}-h{hnum}"
        self.hosts[name] = host
        return host

    def link(self, a: str, b: str) -> tuple[int, int]:
        """Connect switches ``a`` and ``b``; returns (port on a, port on b)."""
        sa, sb = self.switches[a], self.switches[b]
        pa, pb = self._next_port(sa), self._next_port(sb)
        if self.wiring == "tunnel":
            ua, ub = free_udp_port(), free_udp_port()
            sa.ports[pa] = f"tunnel:127.0.0.1:{ua},peer=127.0.0.1:{ub}"
            sb.ports[pb] = f"tunnel:127.0.0.1:{ub},peer=127.0.0.1:{ua}"
        else:
            sa.ports[pa], sb.ports[pb] = self._iface(sa, pa), self._iface(sb, pb)
            self._links.append((sa.ports[pa], sb.ports[pb]))
        return pa, pb

    def switch_ip(self, switch: str) -> str:
        """Aggregation address of ``switch`` (source of its results)."""
        return f"10.{self.switches[switch].num}.0.254"

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Bring everything up with the aggregation program loaded."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._prepare()
            if self.wiring == "tunnel":
                for name, (own, peer) in self._tunnels.items():
                    self._socks[name] = _tunnel_socket(own, peer)
            else:
                self._start_veths()
            self._loop = AsyncLoop()
            for sw in self.switches.values():
                self._spawn(sw)
            for sw in self.switches.values():
                self._connect(sw)
        except BaseException:
            self.stop()
            raise

    @abc.abstractmethod
    def _prepare(self) -> None:
        """Check what the target needs and write its files, before anything is created."""

    @abc.abstractmethod
    def _spawn(self, sw: _Switch) -> None:
        """Start ``sw``'s process on its ports; return once its P4Runtime port accepts."""

    @abc.abstractmethod
    def _connect(self, sw: _Switch) -> None:
        """Connect ``sw.client`` (primary) and push the program."""

    def _start_veths(self) -> None:
        for name, host in self.hosts.items():
            ns, hif = self._host_ns[name], self._host_if[name]
            sif = self.switches[host.switch].ports[host.port]
            run_cmd(["ip", "netns", "add", ns])
            self._netns.append(ns)
            run_cmd(["ip", "link", "add", sif, "type", "veth", "peer", "name", hif])
            run_cmd(["ip", "link", "set", hif, "netns", ns])
            _quiet(sif)
            _quiet(hif, ns)
            run_cmd(["ip", "-n", ns, "link", "set", hif, "address", host.mac])
            run_cmd(["ip", "-n", ns, "link", "set", hif, "up"])
            run_cmd(["ip", "link", "set", sif, "up"])
            self._socks[name] = in_netns(ns, lambda hif=hif: _packet_socket(hif))
        for a, b in self._links:
            run_cmd(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
            for x in (a, b):
                _quiet(x)
                run_cmd(["ip", "link", "set", x, "up"])

    def close_sessions(self) -> None:
        """Close the P4Runtime sessions (e.g. before another controller takes over)."""
        for sw in self.switches.values():
            if sw.client is not None and self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.run(sw.client.__aexit__(None, None, None), timeout=10)
            sw.client = None

    def stop(self) -> None:
        """Tear everything down: sockets, sessions, processes (by PID), interfaces, namespaces."""
        for s in self._socks.values():
            s.close()
        self._socks.clear()
        self.close_sessions()
        for sw in self.switches.values():
            stop_process(sw.proc)
            sw.proc = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        for ns in self._netns:
            run_cmd(["ip", "netns", "del", ns], check=False)
        if self.wiring == "veth":
            for sw in self.switches.values():
                for ifname in sw.ports.values():
                    if Path(f"/sys/class/net/{ifname}").exists():
                        run_cmd(["ip", "link", "del", ifname], check=False)
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
        if self._loop is None:
            raise RuntimeError("network not started")
        return self._loop.run(coro, timeout)

    def install_job(self, switch: str, job: SwitchJob) -> None:
        """Install ``job`` on ``switch`` (controller code path)."""
        self.run(self.client(switch).insert(job_entries(job)))

    def add_route(self, switch: str, prefix: str, port: int, src_mac: str, dst_mac: str) -> None:
        """Install an ordinary IPv4 route."""
        entry = fy.P4TableEntry(
            "ingress.routing.routes", match=fy.P4TableMatch(dst_addr=prefix),
            action=fy.P4TableAction("ingress.routing.route", port=port, src_mac=src_mac,
                                    dst_mac=dst_mac))
        self.run(self.client(switch).insert([entry]))

    def counter(self, switch: str, name: str) -> dict[int, int]:
        """Packet count per index of counter ``name`` (P4Info name, e.g. ``ingress.drops``)."""
        client = self.client(switch)

        async def read() -> dict[int, int]:
            out = {}
            async for e in client.read(fy.P4CounterEntry(name)):
                out[e.index] = e.packet_count
            return out

        return self.run(read())

    def drop_counts(self, switch: str) -> dict[int, int]:
        """Drop counter per :class:`host.protocol.DropReason` value."""
        return self.counter(switch, "ingress.drops")

    # -- data -----------------------------------------------------------------------------
    def send(self, host: str, frame: bytes) -> None:
        """Transmit a raw Ethernet frame from ``host``."""
        self._socks[host].send(frame)

    def recv(self, host: str, count: int = 1, timeout: float = 2.0) -> list[bytes]:
        """Frames received at ``host``: stop after ``count`` or ``timeout`` seconds."""
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
            if self.wiring == "veth" and addr[2] == PACKET_OUTGOING:
                continue   # our own transmission, seen by the packet socket
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


def _quiet(ifname: str, ns: str | None = None) -> None:
    # No IPv6 (no router solicitations or DAD frames that would hit the switch).
    pre = ["ip", "netns", "exec", ns] if ns else []
    run_cmd([*pre, "sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1"], check=False)


def _packet_socket(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((ifname, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    return s


def _tunnel_socket(own: str, peer: str) -> socket.socket:
    h, p = own.rsplit(":", 1)
    ph, pp = peer.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    s.bind((h, int(p)))
    s.connect((ph, int(pp)))
    return s


class Bmv2Network(AggregationNetwork):
    """BMv2 ``simple_switch_grpc`` target on veth pairs and network namespaces (root)."""

    #: simple_switch's 512-byte packet headroom (p4/v1model/include/size.p4)
    max_data_lane_bits = 16

    def __init__(self, workdir: Path, prefix: str | None = None, p4json: Path | None = None,
                 p4info: Path | None = None) -> None:
        super().__init__(workdir, prefix or f"nct{os.getpid() % 100000}", wiring="veth")
        self.p4json = Path(p4json) if p4json else P4_JSON
        self.p4info = Path(p4info) if p4info else P4_INFO

    def _prepare(self) -> None:
        if not (self.p4json.exists() and self.p4info.exists()):
            raise RuntimeError(f"{self.p4json} missing: run `make -C p4` with p4c on PATH")
        if shutil.which("simple_switch_grpc") is None:
            raise RuntimeError("simple_switch_grpc not on PATH")

    def _spawn(self, sw: _Switch) -> None:
        exe = shutil.which("simple_switch_grpc")
        assert exe is not None
        sw.grpc_port = free_tcp_port()
        thrift = free_tcp_port()
        ifs = [a for p, i in sorted(sw.ports.items()) for a in ("-i", f"{p}@{i}")]
        sw.log_path = self.workdir / f"{sw.name}.log"
        cmd = [exe, "--device-id", "1", "-L", "off", "--no-p4", "--thrift-port", str(thrift),
               *ifs, "--", "--grpc-server-addr", f"127.0.0.1:{sw.grpc_port}"]
        sw.proc = spawn_process(cmd, sw.log_path)
        wait_listening(sw.proc, sw.grpc_port, sw.log_path, 20.0, f"simple_switch_grpc {sw.name}")

    def _connect(self, sw: _Switch) -> None:
        assert self._loop is not None
        opts = fy.SwitchOptions(p4info=self.p4info, p4blob=self.p4json, device_id=1)
        client = fy.Switch(sw.name, f"127.0.0.1:{sw.grpc_port}", opts)
        self._loop.run(client.__aenter__(), timeout=120)
        sw.client = client


class SoftswitchNetwork(AggregationNetwork):
    """Software switches (``python -m host.softswitch``) wired by UDP tunnels or veth pairs.

    Parameters
    ----------
    workdir : Path
        Logs and the fallback P4Info go here.
    wiring : {"tunnel", "afpacket"}
        UDP tunnels on 127.0.0.1 (no root) or veth pairs read with AF_PACKET (root).
    prefix : str, optional
        Prefix of interface and namespace names (afpacket wiring).
    switch_args : iterable of str
        More options of ``python -m host.softswitch`` (e.g. ``--no-c-loop``).
    """

    #: widest lanes produced from DATA: all of them (BMv2's 512-byte headroom does not apply)
    max_data_lane_bits = 32

    def __init__(self, workdir: Path, wiring: str = "tunnel", prefix: str | None = None,
                 switch_args: tuple[str, ...] = ()) -> None:
        if wiring not in ("tunnel", "afpacket"):
            raise ValueError(f"SoftswitchNetwork.wiring: {wiring!r} is not 'tunnel' or 'afpacket'")
        super().__init__(workdir, prefix or f"ncs{os.getpid() % 100000}",
                         wiring="tunnel" if wiring == "tunnel" else "veth")
        self.p4info: Path | None = None
        self.switch_args = tuple(switch_args)

    def _prepare(self) -> None:
        self.p4info = p4info_path(self.workdir)

    def _spawn(self, sw: _Switch) -> None:
        sw.grpc_port = free_tcp_port()
        sw.log_path = self.workdir / f"softswitch-{sw.name}.log"
        ports = {p: spec if spec.startswith("tunnel:") else f"afpacket:{spec}"
                 for p, spec in sw.ports.items()}
        sw.proc = start_switch_process(ports, sw.grpc_port, sw.log_path, self.switch_args)

    def _connect(self, sw: _Switch) -> None:
        assert self._loop is not None and self.p4info is not None
        sw.client = connect(self._loop, sw.name, sw.grpc_port, self.p4info)

    def restart_switch(self, switch: str) -> None:
        """Kill ``switch``'s process and start a fresh one on the same ports (empty state)."""
        sw = self.switches[switch]
        if sw.client is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.run(sw.client.__aexit__(None, None, None), timeout=10)
            sw.client = None
        stop_process(sw.proc)
        self._spawn(sw)
        self._connect(sw)
