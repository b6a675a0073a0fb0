"""The desired-state file's schema: validated, frozen dataclasses and the limits they obey.

One declarative file describes the network the controller manages: switches (P4Runtime
address, device id, ports, the switch's own MAC/IPv4 address), hosts (MAC, IPv4, attachment
port), links between switch ports (with optional testbed bandwidth/delay/loss), aggregation
jobs (members, THC parameters b/g/p, policy, slots, aggregation tree) and optional explicit
paths. ``docs/controller.md`` documents every field with units, defaults and examples.
:mod:`control_plane.config.validation` builds these from a file; nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from host import paths
from host.protocol import layout as lay
from host.thc.table import DEFAULT_GRANULARITY, default_table

#: P4Info and BMv2 JSON written by ``p4/build.py`` (p4c).
DEFAULT_P4INFO = paths.V1MODEL_P4INFO
DEFAULT_BMV2_JSON = paths.V1MODEL_BMV2_JSON
#: P4Info of the TNA program written by ``p4/build.py --target tofino`` (Tofino backend).
TOFINO_P4INFO = paths.TOFINO_P4INFO

#: Switch targets the controller knows how to push a pipeline to.
#: ``bmv2``: P4Info + BMv2 JSON; ``softswitch``: P4Info only (netco's software target);
#: ``p4runtime``: any other P4Runtime switch, P4Info + the ``p4blob`` file given per switch;
#: ``tofino``: a Tofino switch's P4Runtime server running p4/tna (P4Info
#: :data:`TOFINO_P4INFO`, ``p4blob`` = the device config the Tofino toolchain built).
TARGETS = ("bmv2", "softswitch", "p4runtime", "tofino")
#: Targets whose program adds packed 8-bit lanes of table values (no per-lane lookup): jobs
#: through them use the values uplink and 8-bit lanes (p4/README.md, "Tofino").
VALUES_TARGETS = ("tofino",)
#: What DATA packets carry (docs/protocol.md): 4-bit indices or 8-bit table values.
UPLINKS = ("indices", "values")
POLICIES = ("exact", "partial")
#: ``egress_spec``/port fields are 9 bits wide; BMv2 uses 511 as its drop port.
MAX_PORT = 510
#: ``job_id`` is a 16-bit header field.
MAX_JOB_ID = 0xFFFF
#: THC table values are ``bit<8>`` action parameters of ``load_table`` (docs/protocol.md).
MAX_GRANULARITY = (1 << lay.VALUE_BITS) - 1
DEFAULT_NUM_SLOTS = 16
DEFAULT_ELECTION_ID = 10
DEFAULT_THC = {"b": lay.INDEX_BITS, "g": DEFAULT_GRANULARITY, "p": "1/32"}
#: Coordinates per DATA packet a switch takes (docs/protocol.md, "Packet width"): the P4
#: programs take :data:`host.protocol.layout.COORDS_PER_PACKET` (256) only; the software target
#: any of :data:`host.protocol.layout.PACKET_WIDTHS` (``netco switch --coords-per-packet``).
PACKET_WIDTHS = lay.PACKET_WIDTHS
DEFAULT_COORDS_PER_PACKET = lay.COORDS_PER_PACKET
#: Targets that take another packet width than the default.
WIDE_TARGETS = ("softswitch",)
#: Targets with UDP ports (``netco switch --port N=udp:HOST:PORT``): a switch's ``udp`` field.
UDP_TARGETS = ("softswitch",)


class ConfigError(ValueError):
    """An invalid desired-state file; each line names a field and how to fix it."""

    def __init__(self, problems: list[str], source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        if len(problems) == 1:
            msg = f"{head}{problems[0]}"
        else:
            msg = f"{head}{len(problems)} problems:\n  " + "\n  ".join(problems)
        super().__init__(msg)

    def lines(self) -> list[str]:
        """One line per problem, each naming the file (for one-line command-line errors)."""
        head = f"{self.source}: " if self.source else ""
        return [f"{head}{p}" for p in self.problems]


@dataclass(frozen=True)
class TlsSpec:
    """How the controller reaches one switch over TLS (docs/security.md): ``ca`` signed the
    switch's certificate; ``cert``/``key`` are the controller's client certificate for a switch
    that requires one; ``server_name`` checks the certificate against another name than the
    switch's address."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None
    server_name: str | None = None


@dataclass(frozen=True)
class SwitchSpec:
    """A P4Runtime switch the controller manages.

    ``addr`` is the switch's own IPv4 address: the source of the results it multicasts and
    the address child switches send partials to (``self_addr``/``parent_addr`` of
    ``set_job``). ``mac`` is the source MAC of routed packets and the destination MAC its
    neighbours use for it. ``udp`` lists the software target's UDP ports (switch port ->
    the ``(host, port)`` it binds: where the host on that port sends its THC datagrams), and
    ``coords_per_packet`` the switch's packet width; both go into the job file workers load
    (``netco controller job``), no switch entry depends on them.
    """

    name: str
    address: str
    device_id: int
    addr: str
    mac: str
    ports: tuple[int, ...] | None
    target: str
    p4blob: Path | None
    #: P4Runtime over TLS (None: plain text, or the controller's ``--tls-*`` flags)
    tls: TlsSpec | None = None
    #: ``(switch port, (host, UDP port))`` of the software target's UDP ports, by port
    udp: tuple[tuple[int, tuple[str, int]], ...] = ()
    #: coordinates per DATA packet (:data:`PACKET_WIDTHS`; other than 256 on the software
    #: target only)
    coords_per_packet: int = DEFAULT_COORDS_PER_PACKET

    def udp_address(self, port: int) -> tuple[str, int] | None:
        """The UDP address the switch binds for ``port`` (its ``udp`` field), or None."""
        return dict(self.udp).get(port)


@dataclass(frozen=True)
class HostSpec:
    """An end host attached to ``switch`` at ``port``. ``mac`` defaults to
    ``02:4e:48:00:XX:YY`` (XX:YY = the host's position in the file, from 1)."""

    name: str
    mac: str
    ip: str
    switch: str
    port: int


@dataclass(frozen=True)
class LinkSpec:
    """A link between two switch ports; bandwidth/delay/loss only matter to testbeds."""

    a: str
    a_port: int
    b: str
    b_port: int
    bandwidth_mbps: float | None = None
    delay_ms: float | None = None
    loss_pct: float | None = None


@dataclass(frozen=True)
class ThcParams:
    """THC parameters of a job (Li et al., NSDI 2024): b bits per index, table values
    ``0..g``, clipped tail mass p."""

    b: int
    g: int
    p: float

    @property
    def table(self) -> tuple[int, ...]:
        """The job's lookup table (index → value), as every worker computes it
        (``host.thc.table.default_table``, what ``THCConfig.levels`` returns)."""
        return tuple(int(v) for v in default_table(self.b, self.g, self.p))


@dataclass(frozen=True)
class TreeNode:
    """One aggregating switch of a job: the members it aggregates and its parent."""

    switch: str
    parent: str | None
    members: tuple[str, ...]


@dataclass(frozen=True)
class JobSpec:
    """An aggregation job. A member's rank is its position in ``members``."""

    name: str
    id: int
    members: tuple[str, ...]
    thc: ThcParams
    policy: str
    num_slots: int
    slot_base: int | None
    lane_bits: int
    tree: tuple[TreeNode, ...]
    tree_explicit: bool
    uplink: str = "indices"
    #: the UDP port every member sends from (its socket binds it); the switches' sender
    #: bindings name it, so a datagram from another port of a member's address is dropped as
    #: BAD_SENDER (issue 33). None: members send from any port (ephemeral sockets).
    worker_port: int | None = None


@dataclass(frozen=True)
class PathSpec:
    """An explicit path for traffic to ``dst``: the switches it crosses, in order."""

    dst: str
    via: tuple[str, ...]
    src: str | None = None


@dataclass(frozen=True)
class ControllerSpec:
    """Controller-wide settings."""

    election_id: int = DEFAULT_ELECTION_ID
    p4info: Path | None = None
    bmv2_json: Path = DEFAULT_BMV2_JSON


@dataclass(frozen=True)
class NetworkConfig:
    """The whole validated desired-state file."""

    switches: tuple[SwitchSpec, ...]
    hosts: tuple[HostSpec, ...]
    links: tuple[LinkSpec, ...]
    jobs: tuple[JobSpec, ...]
    paths: tuple[PathSpec, ...] = ()
    controller: ControllerSpec = field(default_factory=ControllerSpec)

    def switch(self, name: str) -> SwitchSpec:
        """Switch by name."""
        return next(s for s in self.switches if s.name == name)

    def host(self, name: str) -> HostSpec:
        """Host by name."""
        return next(h for h in self.hosts if h.name == name)

    def neighbours(self, name: str) -> dict[str, int]:
        """Switches linked to switch ``name`` → the port on ``name`` that leads there."""
        out: dict[str, int] = {}
        for ln in self.links:
            if ln.a == name:
                out.setdefault(ln.b, ln.a_port)
            elif ln.b == name:
                out.setdefault(ln.a, ln.b_port)
        return out
