"""P4Info loading and indexing for the software target's P4Runtime server.

The server validates every entity generically against whatever P4Info the controller pushed
with ``SetForwardingPipelineConfig`` (P4Runtime specification v1.3, sections 9 and 12): table,
match-field, action, parameter and counter ids, bit widths and match kinds. The aggregation
logic then reads the entries of the tables it knows by *name* (``docs/protocol.md``,
"Controller-installed state").

:func:`netco_p4info` returns the committed compiler output ``p4/build/netco.p4info.txtpb`` when
it exists, else :func:`fallback_p4info`, a P4Info built here with the names and widths of the
v1model program (``p4/v1model``) so that a machine without p4c can still run every part of the
stack. When the compiled file is committed it always wins.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

from finsy.proto import p4i
from google.protobuf import text_format

from host.paths import V1MODEL_P4INFO
from host.protocol import generated_dataplane as dp
from host.protocol import layout as lay

#: the P4Info written by ``p4/build.py`` (p4c) for the v1model program.
COMPILED_P4INFO = V1MODEL_P4INFO

# P4Runtime id prefixes (p4runtime/proto/p4/config/v1/p4types.proto, P4Ids.Prefix).
_PREFIX = {"action": 0x01, "table": 0x02, "counter": 0x12}


@dataclass
class MatchFieldInfo:
    """One match field of a table."""

    id: int
    name: str
    bitwidth: int
    match_type: int  # p4i.MatchField.MatchType value


@dataclass
class ActionInfo:
    """An action and its parameters (id -> (name, bitwidth))."""

    id: int
    name: str
    params: dict[int, tuple[str, int]]

    def param_id(self, name: str) -> int:
        """Id of parameter ``name``."""
        for pid, (pname, _) in self.params.items():
            if pname == name:
                return pid
        raise KeyError(f"action {self.name} has no parameter {name}")


@dataclass
class TableInfo:
    """A table: match fields by id, allowed actions by id with their scope, size."""

    id: int
    name: str
    fields: dict[int, MatchFieldInfo]
    actions: dict[int, int]  # action id -> p4i.ActionRef.Scope
    size: int
    const_default: bool
    default_action_id: int
    needs_priority: bool = field(init=False)

    def __post_init__(self) -> None:
        kinds = {f.match_type for f in self.fields.values()}
        self.needs_priority = bool(kinds & {p4i.MatchField.TERNARY, p4i.MatchField.RANGE,
                                            p4i.MatchField.OPTIONAL})


@dataclass
class CounterInfo:
    """An indirect counter array."""

    id: int
    name: str
    size: int


class P4InfoIndex:
    """Id and name lookups over one P4Info message."""

    def __init__(self, info: p4i.P4Info) -> None:
        self.info = info
        self.actions: dict[int, ActionInfo] = {}
        for a in info.actions:
            params = {p.id: (p.name, p.bitwidth) for p in a.params}
            self.actions[a.preamble.id] = ActionInfo(a.preamble.id, a.preamble.name, params)
        self.tables: dict[int, TableInfo] = {}
        for t in info.tables:
            fields = {f.id: MatchFieldInfo(f.id, f.name, f.bitwidth, f.match_type)
                      for f in t.match_fields}
            acts = {r.id: r.scope for r in t.action_refs}
            self.tables[t.preamble.id] = TableInfo(
                t.preamble.id, t.preamble.name, fields, acts, int(t.size) or 1024,
                bool(t.const_default_action_id), int(t.const_default_action_id))
        self.counters: dict[int, CounterInfo] = {
            c.preamble.id: CounterInfo(c.preamble.id, c.preamble.name, int(c.size))
            for c in info.counters
        }
        self.table_by_name = {t.name: t for t in self.tables.values()}
        self.action_by_name = {a.name: a for a in self.actions.values()}
        self.counter_by_name = {c.name: c for c in self.counters.values()}
        self.direct_counter_ids = {c.preamble.id for c in info.direct_counters}
        self.register_ids = {r.preamble.id for r in info.registers}
        self.meter_ids = {m.preamble.id for m in info.meters} | {m.preamble.id for m in info.direct_meters}

    def table(self, name: str) -> TableInfo:
        """Table by its full name (``ingress.thc_validate.jobs``)."""
        try:
            return self.table_by_name[name]
        except KeyError:
            raise KeyError(f"P4Info has no table {name!r}") from None

    def field_id(self, table: str, name: str) -> int:
        """Match-field id of ``name`` in ``table``."""
        for f in self.table(table).fields.values():
            if f.name == name:
                return f.id
        raise KeyError(f"table {table} has no match field {name!r}")

    def action(self, name: str) -> ActionInfo:
        """Action by its full name."""
        try:
            return self.action_by_name[name]
        except KeyError:
            raise KeyError(f"P4Info has no action {name!r}") from None

    def counter(self, name: str) -> CounterInfo:
        """Counter by its full name."""
        try:
            return self.counter_by_name[name]
        except KeyError:
            raise KeyError(f"P4Info has no counter {name!r}") from None


def parse_p4info(data: bytes | str) -> p4i.P4Info:
    """Parse a P4Info given as binary protobuf or text format."""
    info = p4i.P4Info()
    if isinstance(data, str):
        text_format.Parse(data, info)
        return info
    try:
        info.ParseFromString(data)
        if info.tables or info.actions:
            return info
    except Exception:  # not binary: try text
        pass
    info = p4i.P4Info()
    text_format.Parse(data.decode(), info)
    return info


def load_p4info(path: Path) -> p4i.P4Info:
    """Read a P4Info file (``.txtpb``/``.txt`` text format, else binary)."""
    return parse_p4info(path.read_text() if path.suffix in (".txtpb", ".txt") else path.read_bytes())


def _pid(kind: str, name: str) -> int:
    return (_PREFIX[kind] << 24) | (zlib.crc32(name.encode()) & 0xFFFF)


#: Tables of the v1model program: name -> (match fields, actions, default action, size).
#: Names and widths follow p4/v1model (thc_validate.p4, thc_load.p4, thc_members.p4,
#: routing.p4, size.p4); used only by :func:`fallback_p4info`.
_EXACT, _LPM = p4i.MatchField.EXACT, p4i.MatchField.LPM
_PROGRAM_TABLES = {
    "ingress.thc_validate.jobs": (
        [("job_id", 16, _EXACT)], ["ingress.thc_validate.set_job"],
        "ingress.thc_validate.unknown_job", dp.MAX_JOBS),
    "ingress.thc_validate.senders": (
        [("job_id", 16, _EXACT), ("rank", 8, _EXACT), ("ingress_port", 9, _EXACT),
         ("src_addr", 32, _EXACT)], ["ingress.thc_validate.sender"],
        "ingress.thc_validate.bad_sender", dp.SENDERS_TABLE_SIZE),
    "ingress.thc_load.tables": (
        [("job_id", 16, _EXACT)], ["ingress.thc_load.load_table"],
        "ingress.thc_load.missing_table", dp.MAX_JOBS),
    "egress.thc_members.members": (
        [("job_id", 16, _EXACT), ("egress_port", 9, _EXACT)], ["egress.thc_members.set_member"],
        "NoAction", dp.MEMBERS_TABLE_SIZE),
    "ingress.routing.routes": (
        [("dst_addr", 32, _LPM)], ["ingress.routing.route"], "ingress.routing.no_route",
        dp.ROUTES_TABLE_SIZE),
}
_PROGRAM_ACTIONS = {
    "NoAction": [],
    "ingress.thc_validate.set_job": [
        ("index", 8), ("slot_base", 16), ("num_slots", 16), ("expected", 8), ("lane_bits", 8),
        ("mcast_grp", 16), ("has_parent", 1), ("parent_port", 9), ("parent_addr", 32),
        ("self_addr", 32), ("self_id", 8), ("token", 32)],
    "ingress.thc_validate.unknown_job": [],
    "ingress.thc_validate.sender": [("is_switch", 1), ("udp_port", 16)],
    "ingress.thc_validate.bad_sender": [],
    "ingress.thc_load.load_table": [(f"v{i}", 8) for i in range(lay.TABLE_ENTRIES)],
    "ingress.thc_load.missing_table": [],
    "egress.thc_members.set_member": [("dst_mac", 48), ("dst_addr", 32)],
    "ingress.routing.route": [("port", 9), ("src_mac", 48), ("dst_mac", 48)],
    "ingress.routing.no_route": [],
}
_PROGRAM_COUNTERS = {
    "ingress.drops": lay.DROP_REASONS,
    "ingress.thc_slot.contributions": dp.MAX_JOBS,
    "ingress.thc_slot.rank_contributions": dp.MAX_JOBS * lay.MAX_WORKERS,
    "ingress.thc_output.results": dp.MAX_JOBS,
    "ingress.thc_output.resent": dp.MAX_JOBS,
    "ingress.rate_limit.trips": 1,
}


def fallback_p4info() -> p4i.P4Info:
    """A P4Info equivalent to the v1model program's, for machines without p4c.

    Ids follow P4Runtime's prefix scheme (high byte: object kind). Only used while
    ``p4/build/netco.p4info.txtpb`` is absent; the compiled file replaces it everywhere.
    """
    info = p4i.P4Info()
    info.pkg_info.arch = "v1model"
    info.pkg_info.name = "netco (software target fallback P4Info)"
    for name, params in _PROGRAM_ACTIONS.items():
        a = info.actions.add()
        a.preamble.id = _pid("action", name)
        a.preamble.name = name
        a.preamble.alias = name.rsplit(".", 1)[-1]
        for i, (pname, bits) in enumerate(params, start=1):
            p = a.params.add()
            p.id, p.name, p.bitwidth = i, pname, bits
    for name, (fields, actions, default, size) in _PROGRAM_TABLES.items():
        t = info.tables.add()
        t.preamble.id = _pid("table", name)
        t.preamble.name = name
        t.preamble.alias = name.rsplit(".", 1)[-1]
        for i, (fname, bits, kind) in enumerate(fields, start=1):
            f = t.match_fields.add()
            f.id, f.name, f.bitwidth, f.match_type = i, fname, bits, kind
        for aname in actions:
            r = t.action_refs.add()
            r.id = _pid("action", aname)
        r = t.action_refs.add()
        r.id = _pid("action", default)
        r.scope = p4i.ActionRef.DEFAULT_ONLY
        t.size = size
    for name, size in _PROGRAM_COUNTERS.items():
        c = info.counters.add()
        c.preamble.id = _pid("counter", name)
        c.preamble.name = name
        c.preamble.alias = name.rsplit(".", 1)[-1]
        c.spec.unit = p4i.CounterSpec.PACKETS
        c.size = size
    return info


def netco_p4info() -> p4i.P4Info:
    """The program's P4Info: the compiled one when committed, else :func:`fallback_p4info`."""
    if COMPILED_P4INFO.exists():
        return load_p4info(COMPILED_P4INFO)
    return fallback_p4info()


def write_p4info(info: p4i.P4Info, path: Path) -> Path:
    """Write ``info`` in text format (what finsy's ``SwitchOptions(p4info=...)`` reads)."""
    path.write_text(text_format.MessageToString(info))
    return path
