"""Pure reconciliation: exact diffs between desired and installed entities (no switch)."""

from __future__ import annotations

import copy

import finsy as fy
import pytest
from finsy.proto import p4r

from control_plane.config import parse_config
from control_plane.desired import desired_state
from control_plane.reconcile import OWNER_TAG, diff, normalise

NET = {
    "switches": [{"name": "s1", "address": "127.0.0.1:1", "addr": "10.0.0.254"}],
    "hosts": [{"name": f"h{i}", "mac": f"02:00:00:00:00:0{i}", "ip": f"10.0.0.{i}",
               "attach": f"s1:{i}"} for i in range(1, 5)],
    "jobs": [{"name": "a", "id": 1, "members": ["h1", "h2"]},
             {"name": "b", "id": 2, "members": ["h3", "h4"], "num_slots": 4}],
}


@pytest.fixture(scope="module")
def schema() -> fy.P4Schema:
    from host.softswitch.p4info import netco_p4info

    return fy.P4Schema(netco_p4info())


def desired(raw=NET) -> list:
    from host.softswitch.p4info import netco_p4info

    return desired_state(parse_config(raw), netco_p4info())["s1"]


def route(prefix: str, tag: bytes = b"") -> fy.P4TableEntry:
    return fy.P4TableEntry("ingress.routing.routes", match=fy.P4TableMatch(dst_addr=prefix),
                           action=fy.P4TableAction("ingress.routing.route", port=9,
                                                   src_mac="02:00:00:00:00:99", dst_mac="02:00:00:00:00:98"),
                           metadata=tag)


def roundtrip(ents, schema) -> list:
    """What a switch would return: decode(encode(e)) (finsy's read path)."""
    out = []
    for e in ents:
        msg = e.encode(schema)
        cls = fy.P4TableEntry if msg.HasField("table_entry") else fy.P4MulticastGroupEntry
        out.append(cls.decode(msg, schema))
    return out


def test_counts_of_a_fresh_switch(schema) -> None:
    d = desired()
    # per job: jobs + tables + group + 2 senders + 2 members = 7; routes: 4
    assert len(d) == 2 * 7 + 4
    ins, mod, dele, foreign = diff(d, [], schema)
    assert (len(ins), mod, dele, foreign) == (18, [], [], [])


def test_same_state_needs_no_write(schema) -> None:
    d = desired()
    res = diff(d, roundtrip(d, schema), schema)
    assert res.writes == 0 and res.in_sync and res.unchanged == 18
    assert res.updates(schema) == []


def test_one_changed_job_gives_exactly_its_changes(schema) -> None:
    before = desired()
    raw = copy.deepcopy(NET)
    raw["jobs"][1]["num_slots"] = 6            # job b: set_job param changes
    raw["jobs"][1]["members"] = ["h3"]         # ... loses member h4
    res = diff(desired(raw), roundtrip(before, schema), schema)
    assert res.to_insert == []
    assert [(e.table_id, e.match["job_id"]) for e in res.to_modify if isinstance(e, fy.P4TableEntry)] == [
        ("ingress.thc_validate.jobs", 2)]
    # the group of job b (id 2) shrinks to port 3
    assert [(e.multicast_group_id, list(e.replicas)) for e in res.to_modify
            if isinstance(e, fy.P4MulticastGroupEntry)] == [(2, [3])]
    deleted = sorted((e.table_id, tuple(sorted(e.match.items()))) for e in res.to_delete)
    assert [t for t, _ in deleted] == ["members", "senders"]  # read-back entities carry aliases
    assert all(dict(m)["job_id"] == 2 for _, m in deleted)
    assert res.foreign == [] and res.writes == 4


def test_foreign_entries_are_reported_not_deleted(schema) -> None:
    d = desired()
    theirs = route("192.168.0.0/16")
    grp = fy.P4MulticastGroupEntry(77, replicas=[1, 2])
    installed = roundtrip([*d, theirs, grp], schema)
    res = diff(d, installed, schema)
    assert res.writes == 0 and res.in_sync
    assert len(res.foreign) == 2 and res.to_delete == []
    pruned = diff(d, installed, schema, prune=True)
    assert pruned.writes == 2 and not pruned.in_sync
    ups = pruned.updates(schema)
    assert [(p4r.Update.Type.Name(u.type), u.entity.WhichOneof("entity")) for u in ups] == [
        ("DELETE", "table_entry"), ("DELETE", "packet_replication_engine_entry")]
    # a DELETE carries the key only
    assert not ups[0].entity.table_entry.HasField("action")
    # an owned entry that is no longer desired is stale: deleted without --prune
    stale = route("10.0.0.9/32", OWNER_TAG)
    res = diff(d, roundtrip([*d, stale], schema), schema)
    assert len(res.to_delete) == 1 and res.foreign == []


def test_adopts_equal_untagged_entries_without_writing(schema) -> None:
    """An installed entry equal to a desired one but written by someone else needs no write."""
    d = desired()
    untagged = [fy.P4TableEntry(e.table_id, match=e.match, action=e.action) if isinstance(e, fy.P4TableEntry)
                else e for e in d]
    assert diff(d, roundtrip(untagged, schema), schema).writes == 0


def test_byte_padding_does_not_matter(schema) -> None:
    """A target may return non-canonical (zero-padded) byte strings; keys compare as integers."""
    e = desired()[0]
    msg = e.encode(schema)
    padded = p4r.Entity()
    padded.CopyFrom(msg)
    for m in padded.table_entry.match:
        m.exact.value = m.exact.value.rjust(2, b"\0")
    for p in padded.table_entry.action.action.params:
        p.value = p.value.rjust(4, b"\0")
    a, b = normalise(e, schema), normalise(fy.P4TableEntry.decode(padded, schema), schema)
    assert (a.key, a.value) == (b.key, b.value)


def test_update_order_groups_before_entries_and_deletes_first(schema) -> None:
    d = desired()
    old = route("10.0.0.9/32", OWNER_TAG)
    res = diff(d, roundtrip([old], schema), schema)
    kinds = []
    for up in res.updates(schema):
        kinds.append((p4r.Update.Type.Name(up.type), up.entity.WhichOneof("entity")))
    assert kinds[0] == ("DELETE", "table_entry")
    first_table_insert = kinds.index(("INSERT", "table_entry"))
    assert all(k == ("INSERT", "packet_replication_engine_entry") for k in kinds[1:first_table_insert])
    assert kinds.count(("INSERT", "packet_replication_engine_entry")) == 2
    # the entities stay reusable: planning the same writes twice gives the same messages
    assert res.updates(schema)[1:] == res.updates(schema)[1:]


def test_conflicting_desired_entries_are_an_error(schema) -> None:
    d = desired()
    e = d[0]
    other = fy.P4TableEntry(e.table_id, match=e.match,
                            action=fy.P4TableAction(e.action.name, **{**e.action.args, "expected": 9}))
    with pytest.raises(ValueError, match="two different entries"):
        diff([*d, other], [], schema)
