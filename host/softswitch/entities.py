"""Generic P4Runtime entity store: table entries, multicast groups and counters.

Every entity is checked against the loaded P4Info (P4Runtime specification v1.3, sections 9
"P4 Entity Messages" and 8.4 "Bytestrings") before it is stored, with the status codes a real
target returns: unknown table/action/counter ids ``NOT_FOUND``; a value wider than its field
``OUT_OF_RANGE``; a structurally wrong entity (missing or repeated field, wrong match kind,
action not allowed in the table, bad priority) ``INVALID_ARGUMENT``; insert of an existing
entry ``ALREADY_EXISTS``; modify/delete of a missing one ``NOT_FOUND``; a full table
``RESOURCE_EXHAUSTED``; entities this target does not serve ``UNIMPLEMENTED``.

The store knows nothing about aggregation; :mod:`host.softswitch.config` compiles the tables
of the netco program from it into the arrays the data plane reads.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc
import numpy as np
from finsy.proto import p4i, p4r

from host.softswitch.p4info import P4InfoIndex, TableInfo

INSERT, MODIFY, DELETE = p4r.Update.INSERT, p4r.Update.MODIFY, p4r.Update.DELETE


class P4RuntimeError(Exception):
    """An entity or request rejected with a gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _err(code: grpc.StatusCode, msg: str) -> P4RuntimeError:
    return P4RuntimeError(code, msg)


def bytes_value(b: bytes, bitwidth: int, what: str) -> int:
    """Integer of a P4Runtime bytestring that must fit ``bitwidth`` bits (spec 8.4)."""
    if not b:
        raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"{what}: empty bytestring")
    v = int.from_bytes(b, "big")
    if v >> bitwidth:
        raise _err(grpc.StatusCode.OUT_OF_RANGE,
                   f"{what}: value {v:#x} does not fit {bitwidth} bits")
    return v


def canonical(v: int) -> bytes:
    """Shortest big-endian bytestring of ``v`` (one zero byte for 0)."""
    return v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")


@dataclass
class StoredEntry:
    """A validated table entry: decoded key, action and the canonical message for reads."""

    key: tuple
    priority: int
    action_id: int
    params: dict[int, int]  # param id -> value
    msg: p4r.TableEntry


@dataclass
class TableState:
    """Entries of one table plus its (possibly modified) default action."""

    info: TableInfo
    entries: dict[tuple, StoredEntry] = field(default_factory=dict)
    default: tuple[int, dict[int, int]] | None = None  # None: the program's default


class EntityStore:
    """All controller-written state of one pipeline; replaced on a pipeline commit."""

    def __init__(self, index: P4InfoIndex) -> None:
        self.index = index
        self.tables: dict[int, TableState] = {tid: TableState(t) for tid, t in index.tables.items()}
        self.groups: dict[int, list[tuple[int, int]]] = {}  # group id -> [(port, instance)]
        #: counter id -> packet counts per index (int64 arrays the data plane adds to)
        self.counters: dict[int, np.ndarray] = {
            cid: np.zeros(c.size, dtype=np.int64) for cid, c in index.counters.items()}
        self.generation = 0
        #: Program-level check of an entry before it is stored, called with
        #: ``(store, table, op, key, action_id, params)``; raises :class:`P4RuntimeError`.
        self.entry_check: Callable[[EntityStore, TableInfo, int, tuple, int, dict[int, int]],
                                   None] | None = None
        #: The updates of the Write being applied (checks may look ahead at the batch).
        self.batch: Sequence[p4r.Update] = ()

    # -- tables ---------------------------------------------------------------------------
    def _decode_key(self, t: TableInfo, te: p4r.TableEntry) -> tuple[tuple, list[p4r.FieldMatch]]:
        seen: dict[int, tuple] = {}
        canon: list[p4r.FieldMatch] = []
        for fm in te.match:
            f = t.fields.get(fm.field_id)
            if f is None:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                           f"table {t.name}: unknown match field id {fm.field_id}")
            if fm.field_id in seen:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                           f"table {t.name}: match field {f.name} given twice")
            kind = fm.WhichOneof("field_match_type")
            what = f"table {t.name} field {f.name}"
            c = p4r.FieldMatch(field_id=fm.field_id)
            mt = p4i.MatchField
            if kind == "exact" and f.match_type == mt.EXACT:
                v = bytes_value(fm.exact.value, f.bitwidth, what)
                seen[f.id] = ("exact", v)
                c.exact.value = canonical(v)
            elif kind == "lpm" and f.match_type == mt.LPM:
                plen = fm.lpm.prefix_len
                if not 0 < plen <= f.bitwidth:
                    raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                               f"{what}: prefix length {plen} not in 1..{f.bitwidth} "
                               "(omit the field for a wildcard)")
                v = bytes_value(fm.lpm.value, f.bitwidth, what)
                if v & ((1 << (f.bitwidth - plen)) - 1):
                    raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                               f"{what}: bits beyond the /{plen} prefix are set")
                seen[f.id] = ("lpm", v, plen)
                c.lpm.value, c.lpm.prefix_len = canonical(v), plen
            elif kind == "ternary" and f.match_type == mt.TERNARY:
                v = bytes_value(fm.ternary.value, f.bitwidth, what)
                m = bytes_value(fm.ternary.mask, f.bitwidth, what + " mask")
                if m == 0 or v & ~m:
                    raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                               f"{what}: zero mask or value bits outside the mask")
                seen[f.id] = ("ternary", v, m)
                c.ternary.value, c.ternary.mask = canonical(v), canonical(m)
            elif kind == "range" and f.match_type == mt.RANGE:
                lo = bytes_value(fm.range.low, f.bitwidth, what)
                hi = bytes_value(fm.range.high, f.bitwidth, what)
                if lo > hi:
                    raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"{what}: low > high")
                seen[f.id] = ("range", lo, hi)
                c.range.low, c.range.high = canonical(lo), canonical(hi)
            elif kind == "optional" and f.match_type == mt.OPTIONAL:
                v = bytes_value(fm.optional.value, f.bitwidth, what)
                seen[f.id] = ("optional", v)
                c.optional.value = canonical(v)
            else:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                           f"{what}: match kind {kind} does not fit the field's match type")
            canon.append(c)
        for f in t.fields.values():
            if f.id not in seen and f.match_type == p4i.MatchField.EXACT:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                           f"table {t.name}: exact match field {f.name} missing")
        canon.sort(key=lambda c: c.field_id)
        return tuple(sorted(seen.items())), canon

    def _decode_action(self, t: TableInfo, ta: p4r.TableAction, default: bool) -> tuple[int, dict[int, int]]:
        if ta.WhichOneof("type") != "action":
            raise _err(grpc.StatusCode.UNIMPLEMENTED,
                       f"table {t.name}: action profiles are not supported by this target")
        a = self.index.actions.get(ta.action.action_id)
        if a is None:
            raise _err(grpc.StatusCode.NOT_FOUND, f"unknown action id {ta.action.action_id}")
        scope = t.actions.get(a.id)
        if scope is None:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                       f"action {a.name} is not an action of table {t.name}")
        if not default and scope == p4i.ActionRef.DEFAULT_ONLY:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                       f"action {a.name} is default-only in table {t.name}")
        if default and scope == p4i.ActionRef.TABLE_ONLY:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"action {a.name} cannot be the default of {t.name}")
        params: dict[int, int] = {}
        for p in ta.action.params:
            spec = a.params.get(p.param_id)
            if spec is None:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                           f"action {a.name}: unknown parameter id {p.param_id}")
            if p.param_id in params:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"action {a.name}: parameter {spec[0]} twice")
            params[p.param_id] = bytes_value(p.value, spec[1], f"action {a.name} parameter {spec[0]}")
        missing = [name for pid, (name, _) in a.params.items() if pid not in params]
        if missing:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"action {a.name}: missing parameters {missing}")
        return a.id, params

    def _table(self, te: p4r.TableEntry) -> TableState:
        ts = self.tables.get(te.table_id)
        if ts is None:
            raise _err(grpc.StatusCode.NOT_FOUND, f"unknown table id {te.table_id}")
        return ts

    def _delete(self, store: dict, key: object, missing: str) -> None:
        """Delete ``key`` of ``store`` (a table's entries, the multicast groups); NOT_FOUND with
        ``missing`` when it holds none."""
        if key not in store:
            raise _err(grpc.StatusCode.NOT_FOUND, missing)
        del store[key]
        self.generation += 1

    def write_table_entry(self, op: int, te: p4r.TableEntry) -> None:
        """Apply one INSERT/MODIFY/DELETE of a table entry."""
        ts = self._table(te)
        t = ts.info
        if te.is_default_action:
            if op != MODIFY:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, "default entries can only be modified")
            if te.match:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT, "a default entry has no match key")
            if t.const_default:
                raise _err(grpc.StatusCode.PERMISSION_DENIED, f"table {t.name} has a const default action")
            ts.default = self._decode_action(t, te.action, default=True) if te.HasField("action") else None
            self.generation += 1
            return
        if te.priority < 0 or (t.needs_priority and te.priority == 0 and op != DELETE):
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"table {t.name}: priority must be > 0")
        if not t.needs_priority and te.priority != 0:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                       f"table {t.name}: priority must be 0 for exact/LPM tables")
        key, canon = self._decode_key(t, te)
        key = (key, te.priority)
        if op == DELETE:
            self._delete(ts.entries, key, f"table {t.name}: no such entry")
            return
        if not te.HasField("action"):
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"table {t.name}: entry without an action")
        aid, params = self._decode_action(t, te.action, default=False)
        if op == INSERT:
            if key in ts.entries:
                raise _err(grpc.StatusCode.ALREADY_EXISTS, f"table {t.name}: entry already exists")
            if len(ts.entries) >= t.size:
                raise _err(grpc.StatusCode.RESOURCE_EXHAUSTED, f"table {t.name} is full ({t.size} entries)")
        elif op == MODIFY:
            if key not in ts.entries:
                raise _err(grpc.StatusCode.NOT_FOUND, f"table {t.name}: no such entry")
        else:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, f"unknown update type {op}")
        if self.entry_check is not None:
            self.entry_check(self, t, op, key, aid, params)
        msg = p4r.TableEntry(table_id=t.id, priority=te.priority, metadata=te.metadata)
        msg.match.extend(canon)
        act = msg.action.action
        act.action_id = aid
        for pid in sorted(params):
            act.params.add(param_id=pid, value=canonical(params[pid]))
        ts.entries[key] = StoredEntry(key, te.priority, aid, params, msg)
        self.generation += 1

    def read_table_entries(self, te: p4r.TableEntry) -> list[p4r.TableEntry]:
        """Entries matching a read filter (table id 0: all tables; no match: all entries)."""
        states = list(self.tables.values()) if te.table_id == 0 else [self._table(te)]
        out: list[p4r.TableEntry] = []
        for ts in states:
            if te.is_default_action:
                d = p4r.TableEntry(table_id=ts.info.id, is_default_action=True)
                aid, params = ts.default if ts.default else (ts.info.default_action_id, {})
                if aid:
                    d.action.action.action_id = aid
                    for pid in sorted(params):
                        d.action.action.params.add(param_id=pid, value=canonical(params[pid]))
                out.append(d)
                continue
            if te.match:
                key, _ = self._decode_key(ts.info, te)
                e = ts.entries.get((key, te.priority))
                out.extend([e.msg] if e else [])
            else:
                out.extend(e.msg for e in ts.entries.values())
        return out

    # -- multicast ------------------------------------------------------------------------
    def write_multicast_group(self, op: int, g: p4r.MulticastGroupEntry) -> None:
        """Apply one update of a multicast group (packet replication engine)."""
        gid = g.multicast_group_id
        if gid == 0:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, "multicast group id 0 is reserved")
        if op == DELETE:
            self._delete(self.groups, gid, f"multicast group {gid} does not exist")
            return
        replicas: list[tuple[int, int]] = []
        for r in g.replicas:
            port = int.from_bytes(r.port, "big") if r.port else r.egress_port
            if port >= 511 or port < 0:
                raise _err(grpc.StatusCode.OUT_OF_RANGE, f"multicast group {gid}: port {port} out of range")
            if (port, r.instance) in replicas:
                raise _err(grpc.StatusCode.INVALID_ARGUMENT,
                           f"multicast group {gid}: replica (port {port}, instance {r.instance}) twice")
            replicas.append((port, r.instance))
        if op == INSERT and gid in self.groups:
            raise _err(grpc.StatusCode.ALREADY_EXISTS, f"multicast group {gid} already exists")
        if op == MODIFY and gid not in self.groups:
            raise _err(grpc.StatusCode.NOT_FOUND, f"multicast group {gid} does not exist")
        self.groups[gid] = replicas
        self.generation += 1

    def read_multicast_groups(self, gid: int) -> list[p4r.MulticastGroupEntry]:
        """Groups matching a read filter (0: all)."""
        ids = sorted(self.groups) if gid == 0 else ([gid] if gid in self.groups else [])
        out = []
        for i in ids:
            g = p4r.MulticastGroupEntry(multicast_group_id=i)
            for port, inst in self.groups[i]:
                g.replicas.add(egress_port=port, instance=inst)
            out.append(g)
        return out

    # -- counters -------------------------------------------------------------------------
    def _counter(self, cid: int) -> np.ndarray:
        vals = self.counters.get(cid)
        if vals is None:
            if cid in self.index.register_ids or cid in self.index.meter_ids:
                raise _err(grpc.StatusCode.UNIMPLEMENTED, f"entity {cid} is not served over P4Runtime")
            raise _err(grpc.StatusCode.NOT_FOUND, f"unknown counter id {cid}")
        return vals

    def write_counter(self, op: int, ce: p4r.CounterEntry) -> None:
        """Set a counter cell (only MODIFY is defined for indirect counters)."""
        if op != MODIFY:
            raise _err(grpc.StatusCode.INVALID_ARGUMENT, "counter entries can only be modified")
        vals = self._counter(ce.counter_id)
        idx = [ce.index.index] if ce.HasField("index") else range(len(vals))
        for i in idx:
            if not 0 <= i < len(vals):
                raise _err(grpc.StatusCode.OUT_OF_RANGE, f"counter index {i} not in 0..{len(vals) - 1}")
            vals[i] = ce.data.packet_count

    def read_counters(self, ce: p4r.CounterEntry) -> list[p4r.CounterEntry]:
        """Counter cells matching a read filter (id 0: all counters; no index: all cells)."""
        ids = sorted(self.counters) if ce.counter_id == 0 else [ce.counter_id]
        out = []
        for cid in ids:
            vals = self._counter(cid)
            if ce.HasField("index"):
                i = ce.index.index
                if not 0 <= i < len(vals):
                    raise _err(grpc.StatusCode.OUT_OF_RANGE, f"counter index {i} not in 0..{len(vals) - 1}")
                cells = [i]
            else:
                cells = range(len(vals))
            for i in cells:
                e = p4r.CounterEntry(counter_id=cid)
                e.index.index = i
                e.data.packet_count = int(vals[i])
                out.append(e)
        return out

    def snapshot(self) -> EntityStore:
        """A deep copy (for tests and for atomic rollbacks)."""
        return copy.deepcopy(self)
