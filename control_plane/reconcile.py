"""Reconciliation: compare desired entities with what a switch holds, and plan the writes.

Both sides are normalised through the switch's P4 schema (finsy's ``P4Schema``): each entity
is encoded to its P4Runtime message, and compared as a *key* (what identifies it: table id +
match fields as integers + priority, or the multicast group id) and a *value* (action id +
parameters as integers, or the replica set). Integers rather than bytes make the comparison
immune to how a target pads byte strings (P4Runtime §8.4, canonical byte strings).

Ownership: every entity the controller writes carries :data:`OWNER_TAG` in its ``metadata``
field (P4Runtime ≥ 1.2 for table entries, 1.4 for multicast groups). An installed entity
whose key is not desired is

* *stale* (``to_delete``) when it carries the tag — the controller wrote it and no longer
  wants it (a removed job, a moved host);
* *foreign* otherwise — somebody else wrote it. Foreign entities are reported and deleted
  only when ``prune`` is asked for.

An installed entity with a desired key but another value is modified (the desired state wins
on the keys it derives). The tag itself is not part of the value, so a target that does not
keep ``metadata`` still reconciles to zero writes; its stale entries then show up as
foreign.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import finsy as fy
from finsy.proto import p4r

from control_plane.tokens import mask_token

#: ``metadata`` of every entity the controller writes.
OWNER_TAG = b"netco-controller/1"


def _int(b: bytes) -> int:
    return int.from_bytes(b, "big")


def _match_key(fm: p4r.FieldMatch) -> tuple:
    kind = fm.WhichOneof("field_match_type")
    m = getattr(fm, kind)
    if kind == "exact":
        return (fm.field_id, kind, _int(m.value))
    if kind == "lpm":
        return (fm.field_id, kind, _int(m.value), m.prefix_len)
    if kind == "ternary":
        return (fm.field_id, kind, _int(m.value), _int(m.mask))
    if kind == "range":
        return (fm.field_id, kind, _int(m.low), _int(m.high))
    if kind == "optional":
        return (fm.field_id, kind, _int(m.value))
    return (fm.field_id, kind, m.SerializeToString(deterministic=True))


def _replica_port(r: p4r.Replica) -> int:
    if r.HasField("port"):
        return _int(r.port)
    return int(r.egress_port)


@dataclass(frozen=True)
class Normalised:
    """An entity reduced to comparable parts."""

    key: tuple
    value: Any
    owned: bool
    entity: Any = field(compare=False)


def normalise(entity: Any, schema: fy.P4Schema) -> Normalised:
    """Key, value and ownership of a finsy entity (desired or read back).

    Raises
    ------
    ValueError
        For entity kinds the controller does not manage.
    """
    msg: p4r.Entity = entity.encode(schema)
    kind = msg.WhichOneof("entity")
    if kind == "table_entry":
        te = msg.table_entry
        key = ("table", te.table_id, tuple(sorted(_match_key(m) for m in te.match)), te.priority,
               te.is_default_action)
        act = te.action
        which = act.WhichOneof("type")
        if which == "action":
            value: Any = (act.action.action_id,
                          tuple(sorted((p.param_id, _int(p.value)) for p in act.action.params)))
        elif which is None:
            value = None
        else:
            value = (which, getattr(act, which).SerializeToString(deterministic=True))
        return Normalised(key, value, te.metadata == OWNER_TAG, entity)
    if kind == "packet_replication_engine_entry":
        pre = msg.packet_replication_engine_entry
        if pre.WhichOneof("type") == "multicast_group_entry":
            g = pre.multicast_group_entry
            value = tuple(sorted((_replica_port(r), r.instance) for r in g.replicas))
            return Normalised(("mcast", g.multicast_group_id), value, g.metadata == OWNER_TAG, entity)
    raise ValueError(f"reconcile: unsupported entity kind {kind!r}")


@dataclass
class Diff:
    """What to write to make a switch hold the desired state.

    Iterating yields ``(to_insert, to_modify, to_delete, foreign)``.
    """

    to_insert: list = field(default_factory=list)
    to_modify: list = field(default_factory=list)
    to_delete: list = field(default_factory=list)
    foreign: list = field(default_factory=list)
    unchanged: int = 0
    prune: bool = False

    def __iter__(self) -> Iterator[list]:
        return iter((self.to_insert, self.to_modify, self.to_delete, self.foreign))

    @property
    def writes(self) -> int:
        """Number of updates :func:`updates` produces."""
        n = len(self.to_insert) + len(self.to_modify) + len(self.to_delete)
        return n + (len(self.foreign) if self.prune else 0)

    @property
    def in_sync(self) -> bool:
        """True when nothing needs writing (foreign entries alone do not count)."""
        return self.writes == 0

    def updates(self, schema: fy.P4Schema) -> list[p4r.Update]:
        """P4Runtime updates in a safe order: deletes of table entries first, then of groups;
        inserts of groups before table entries (a job entry names its group); modifies last.

        Built as messages rather than with finsy's ``+e``/``-e``/``~e``, which mark the entity
        object itself and so could not be reused by the next reconciliation.
        """
        dels = self.to_delete + (self.foreign if self.prune else [])
        tables_first = sorted(dels, key=lambda e: isinstance(e, fy.P4MulticastGroupEntry))
        groups_first = sorted(self.to_insert, key=lambda e: not isinstance(e, fy.P4MulticastGroupEntry))
        U = p4r.Update
        return ([U(type=U.DELETE, entity=_strip(e).encode(schema)) for e in tables_first]
                + [U(type=U.INSERT, entity=e.encode(schema)) for e in groups_first]
                + [U(type=U.MODIFY, entity=e.encode(schema)) for e in self.to_modify])


def _strip(e: Any) -> Any:
    """A read-back entity reduced to what a DELETE needs (no counter data)."""
    if isinstance(e, fy.P4TableEntry):
        return fy.P4TableEntry(e.table_id, match=e.match, priority=e.priority,
                               is_default_action=e.is_default_action)
    if isinstance(e, fy.P4MulticastGroupEntry):
        return fy.P4MulticastGroupEntry(e.multicast_group_id)
    return e


def diff(desired: Iterable[Any], installed: Iterable[Any], schema: fy.P4Schema,
         prune: bool = False) -> Diff:
    """Plan the writes that turn ``installed`` into ``desired`` on one switch.

    Parameters
    ----------
    desired : iterable of finsy entities
        What the controller derived for the switch.
    installed : iterable of finsy entities
        What a wildcard read returned.
    schema : finsy.P4Schema
        The switch's P4 schema; both sides are normalised through it.
    prune : bool
        Also delete foreign entities (they are still listed in ``foreign``).

    Raises
    ------
    ValueError
        If ``desired`` holds two entities with one key but different values.
    """
    want: dict[tuple, Normalised] = {}
    for e in desired:
        n = normalise(e, schema)
        if n.key in want and want[n.key].value != n.value:
            raise ValueError(f"desired state holds two different entries for {describe(e)}")
        want[n.key] = n
    have: dict[tuple, Normalised] = {}
    for e in installed:
        n = normalise(e, schema)
        have[n.key] = n
    out = Diff(prune=prune)
    for key, w in want.items():
        h = have.get(key)
        if h is None:
            out.to_insert.append(w.entity)
        elif h.value != w.value:
            out.to_modify.append(w.entity)
        else:
            out.unchanged += 1
    for key, h in have.items():
        if key in want:
            continue
        (out.to_delete if h.owned else out.foreign).append(h.entity)
    return out


def describe(e: Any) -> str:
    """One line naming an entity, e.g. ``thc_validate.jobs job_id=7 -> set_job(index=0, ...)``.

    A job's ``token`` parameter is masked (:func:`control_plane.tokens.mask_token`): these
    lines go to terminals and logs (``show``, ``diff``, ``status --entries``)."""
    if isinstance(e, fy.P4TableEntry):
        match = " ".join(f"{k}={_fmt(v)}" for k, v in (e.match or {}).items())
        act = e.action
        if isinstance(act, fy.P4TableAction):
            args = ", ".join(f"{k}={mask_token(int(v)) if k == 'token' else _fmt(v)}"
                             for k, v in act.args.items())
            action = f"{act.name}({args})"
        else:
            action = str(act)
        return f"{e.table_id} {match} -> {action}"
    if isinstance(e, fy.P4MulticastGroupEntry):
        return f"multicast group {e.multicast_group_id} -> replicas {e.replicas_str()}"
    return repr(e)


def _fmt(v: Any) -> str:
    if isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, int) for x in v):
        return f"{v[0]}/{v[1]}"
    return str(v)
