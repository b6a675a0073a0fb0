"""Desired state derived from a config, checked against hand-computed expectations (no switch)."""

from __future__ import annotations

import copy

import finsy as fy
import pytest
from finsy.proto import p4i

from control_plane import routing
from control_plane.config import ConfigError, parse_config
from control_plane.desired import desired_state
from control_plane.placement import Limits, limits_from_p4info, place
from control_plane.reconcile import OWNER_TAG, diff
from tests.support import aggnet

TREE = {
    "switches": [
        {"name": "root", "address": "127.0.0.1:1", "addr": "10.0.255.1", "mac": "02:aa:00:00:00:01"},
        {"name": "leaf0", "address": "127.0.0.1:2", "addr": "10.0.255.2", "mac": "02:aa:00:00:00:02"},
        {"name": "leaf1", "address": "127.0.0.1:3", "addr": "10.0.255.3", "mac": "02:aa:00:00:00:03"},
    ],
    "hosts": [
        {"name": "a0", "mac": "02:00:00:00:01:01", "ip": "10.0.1.1", "attach": "leaf0:1"},
        {"name": "a1", "mac": "02:00:00:00:01:02", "ip": "10.0.1.2", "attach": "leaf0:2"},
        {"name": "b0", "mac": "02:00:00:00:02:01", "ip": "10.0.2.1", "attach": "leaf1:1"},
        {"name": "b1", "mac": "02:00:00:00:02:02", "ip": "10.0.2.2", "attach": "leaf1:2"},
    ],
    "links": [{"a": "leaf0:3", "b": "root:1"}, {"a": "leaf1:3", "b": "root:2"}],
    "jobs": [
        {"name": "big", "id": 7, "members": ["a0", "a1", "b0", "b1"], "num_slots": 40},
        {"name": "small", "id": 3, "members": ["a1", "b1"], "num_slots": 8},
    ],
}


def p4info() -> p4i.P4Info:
    from host.softswitch.p4info import netco_p4info

    return netco_p4info()


def schema() -> fy.P4Schema:
    return fy.P4Schema(p4info())


def tables(ents, name: str) -> list[fy.P4TableEntry]:
    return [e for e in ents if isinstance(e, fy.P4TableEntry) and e.table_id == name]


def job_action(ents, job_id: int) -> dict:
    (e,) = [e for e in tables(ents, "ingress.thc_validate.jobs") if e.match["job_id"] == job_id]
    return dict(e.action.args)


def groups(ents) -> dict[int, list[int]]:
    return {e.multicast_group_id: list(e.replicas) for e in ents
            if isinstance(e, fy.P4MulticastGroupEntry)}


def test_two_jobs_get_disjoint_slots_and_distinct_groups() -> None:
    cfg = parse_config(TREE)
    d = desired_state(cfg, p4info())
    for sw in ("root", "leaf0", "leaf1"):
        small, big = job_action(d[sw], 3), job_action(d[sw], 7)
        # id order: small (3) first -> index 0, slots 0..7; big -> index 1, slots 8..47
        assert (small["index"], small["slot_base"], small["num_slots"]) == (0, 0, 8)
        assert (big["index"], big["slot_base"], big["num_slots"]) == (1, 8, 40)
        assert small["mcast_grp"] != big["mcast_grp"]
        assert set(groups(d[sw])) == {small["mcast_grp"], big["mcast_grp"]}


def test_two_level_tree_parent_child_entries() -> None:
    d = desired_state(parse_config(TREE), p4info())
    leaf0 = job_action(d["leaf0"], 7)
    assert leaf0 == {
        "index": 1, "slot_base": 8, "num_slots": 40, "expected": 2, "lane_bits": 8, "mcast_grp": 2,
        "has_parent": 1, "parent_port": 3, "parent_addr": "10.0.255.1", "self_addr": "10.0.255.2",
        "self_id": 0,  # lowest rank below leaf0 (a0 = rank 0)
        "token": 0,    # desired_state without tokens (the controller passes its own)
    }
    leaf1 = job_action(d["leaf1"], 7)
    assert (leaf1["has_parent"], leaf1["parent_port"], leaf1["self_id"]) == (1, 3, 2)  # b0 = rank 2
    root = job_action(d["root"], 7)
    assert (root["has_parent"], root["expected"], root["self_addr"]) == (0, 2, "10.0.255.1")
    senders = sorted((e.match["rank"], e.match["ingress_port"], e.match["src_addr"],
                      e.action.args["is_switch"])
                     for e in tables(d["root"], "ingress.thc_validate.senders") if e.match["job_id"] == 7)
    assert senders == [(0, 1, "10.0.255.2", 1), (2, 2, "10.0.255.3", 1)]
    leaf_senders = sorted((e.match["rank"], e.match["ingress_port"], e.match["src_addr"],
                           e.action.args["is_switch"])
                          for e in tables(d["leaf0"], "ingress.thc_validate.senders")
                          if e.match["job_id"] == 7)
    assert leaf_senders == [(0, 1, "10.0.1.1", 0), (1, 2, "10.0.1.2", 0)]
    # results fan out to the children at the root and to the workers at the leaves
    assert groups(d["root"])[2] == [1, 2]
    assert groups(d["leaf0"])[2] == [1, 2]
    members = {e.match["egress_port"]: (e.action.args["dst_mac"], e.action.args["dst_addr"])
               for e in tables(d["root"], "egress.thc_members.members") if e.match["job_id"] == 7}
    assert members == {1: ("02:aa:00:00:00:02", "10.0.255.2"), 2: ("02:aa:00:00:00:03", "10.0.255.3")}


def test_child_id_never_collides_with_a_worker_rank_at_the_parent() -> None:
    # root aggregates worker r0 (rank 0) itself and child leaf0 (workers rank 1, 2).
    raw = copy.deepcopy(TREE)
    raw["hosts"].append({"name": "r0", "mac": "02:00:00:00:00:09", "ip": "10.0.0.9", "attach": "root:5"})
    raw["jobs"] = [{"name": "j", "id": 1, "members": ["r0", "a0", "a1"], "root": "root"}]
    d = desired_state(parse_config(raw), p4info())
    ranks = [e.match["rank"] for e in tables(d["root"], "ingress.thc_validate.senders")]
    assert sorted(ranks) == [0, 1]  # r0 = 0, leaf0 = lowest rank below it = 1
    assert job_action(d["leaf0"], 1)["self_id"] == 1
    assert "leaf1" not in {n.switch for n in parse_config(raw).jobs[0].tree}
    assert not tables(d["leaf1"], "ingress.thc_validate.jobs")


def test_thc_table_and_lane_width() -> None:
    raw = copy.deepcopy(TREE)
    raw["jobs"] = [{"name": "j", "id": 1, "members": ["a0", "a1"], "thc": {"g": 200, "p": 0.05}}]
    cfg = parse_config(raw)
    from host.thc.config import THCConfig

    expected = THCConfig(bits=4, granularity=200, clip_mass=0.05).levels
    d = desired_state(cfg, p4info())
    (t,) = tables(d["leaf0"], "ingress.thc_load.tables")
    assert [t.action.args[f"v{i}"] for i in range(16)] == list(expected)
    assert expected[0] == 0 and expected[-1] == 200
    assert job_action(d["leaf0"], 1)["lane_bits"] == 16  # 2 * 200 = 400 > 255
    # defaults b=4, g=30, p=1/32 give THC's published table
    raw["jobs"][0].pop("thc")
    (t,) = tables(desired_state(parse_config(raw), p4info())["leaf0"], "ingress.thc_load.tables")
    assert [t.action.args[f"v{i}"] for i in range(16)] == [0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21,
                                                           23, 25, 27, 30]


def test_slots_must_fit_the_pool() -> None:
    cfg = parse_config(TREE)
    with pytest.raises(ConfigError) as info:
        place(cfg, Limits(slot_pool=45))
    assert info.value.problems == [
        "jobs[0].num_slots: no free range of 40 slots left (all jobs ask for 48, the switch has 45); "
        "lower num_slots of some jobs"]
    with pytest.raises(ConfigError, match="jobs: 2 jobs, the switch program serves 1 at once"):
        place(cfg, Limits(max_jobs=1))


def test_explicit_slot_base_is_kept_and_overlaps_refused() -> None:
    raw = copy.deepcopy(TREE)
    raw["jobs"][0]["slot_base"] = 100
    p = place(parse_config(raw))
    assert p.slots == {"big": (100, 40), "small": (0, 8)}
    raw["jobs"][1]["slot_base"] = 120
    with pytest.raises(ConfigError, match=r"jobs\[0\].slot_base: slots 100..139 overlap job small's"):
        place(parse_config(raw))
    raw["jobs"][1]["slot_base"] = 250
    with pytest.raises(ConfigError, match=r"jobs\[1\].slot_base: slots 250..257 leave the switch's pool"):
        place(parse_config(raw))


def test_first_fit_fills_gaps_between_explicit_ranges() -> None:
    raw = copy.deepcopy(TREE)
    raw["jobs"][0]["slot_base"] = 4  # big: 4..43, small (8 slots) cannot fit 0..3 -> 44..51
    assert place(parse_config(raw)).slots == {"big": (4, 40), "small": (44, 8)}


def test_slot_pool_and_job_limit_come_from_the_p4info() -> None:
    info = p4i.P4Info()
    info.CopyFrom(p4info())
    r = info.registers.add()
    r.preamble.id, r.preamble.name, r.size = 0x0F000001, "ingress.thc_slot.round_reg", 4 * 32
    t = next(t for t in info.tables if t.preamble.name == "ingress.thc_validate.jobs")
    t.size = 5
    lim = limits_from_p4info(info)
    assert (lim.slot_pool, lim.max_jobs) == (32, 5)
    with pytest.raises(ConfigError, match="the switch has 32"):
        desired_state(parse_config(TREE), info)


# -- routes ---------------------------------------------------------------------------------

RING = {
    # s1 - s2 - s3 - s4 - s1 (a ring); host hN on sN port 1
    "switches": [{"name": f"s{i}", "address": f"127.0.0.1:{i}", "addr": f"10.9.0.{i}",
                  "mac": f"02:bb:00:00:00:0{i}"} for i in range(1, 5)],
    "hosts": [{"name": f"h{i}", "mac": f"02:00:00:00:09:0{i}", "ip": f"10.1.0.{i}",
               "attach": f"s{i}:1"} for i in range(1, 5)],
    "links": [{"a": "s1:2", "b": "s2:3"}, {"a": "s2:2", "b": "s3:3"},
              {"a": "s3:2", "b": "s4:3"}, {"a": "s4:2", "b": "s1:3"}],
    "jobs": [],
}


def route_of(ents, ip: str) -> dict:
    (e,) = [e for e in tables(ents, "ingress.routing.routes") if e.match["dst_addr"] == (ip, 32)
            or e.match["dst_addr"] == f"{ip}/32"]
    return dict(e.action.args)


def test_routes_follow_shortest_paths() -> None:
    cfg = parse_config(RING)
    d = desired_state(cfg, p4info())
    # local host: its own port and MAC
    assert route_of(d["s1"], "10.1.0.1") == {"port": 1, "src_mac": "02:bb:00:00:00:01",
                                             "dst_mac": "02:00:00:00:09:01"}
    # neighbours: one hop
    assert route_of(d["s1"], "10.1.0.2") == {"port": 2, "src_mac": "02:bb:00:00:00:01",
                                             "dst_mac": "02:bb:00:00:00:02"}
    assert route_of(d["s1"], "10.1.0.4")["port"] == 3
    # opposite corner: two equal paths; the tie goes to the first switch in the file (s2)
    assert route_of(d["s1"], "10.1.0.3") == {"port": 2, "src_mac": "02:bb:00:00:00:01",
                                             "dst_mac": "02:bb:00:00:00:02"}
    assert routing.path(cfg, "s1", "h3") == ["s1", "s2", "s3"]
    assert all(len(tables(d[s], "ingress.routing.routes")) == 4 for s in d)


def test_explicit_path_overrides_shortest_path() -> None:
    raw = copy.deepcopy(RING)
    raw["paths"] = [{"src": "h2", "dst": "h3", "via": ["s2", "s1", "s4", "s3"]}]
    cfg = parse_config(raw)
    d = desired_state(cfg, p4info())
    assert routing.path(cfg, "s2", "h3") == ["s2", "s1", "s4", "s3"]
    assert route_of(d["s2"], "10.1.0.3")["port"] == 3   # towards s1, not straight to s3
    assert route_of(d["s1"], "10.1.0.3")["port"] == 3   # towards s4
    assert route_of(d["s4"], "10.1.0.3")["port"] == 3   # towards s3 (link s3:2 - s4:3)
    # other destinations keep their shortest paths
    assert route_of(d["s2"], "10.1.0.1")["port"] == 3
    assert routing.path(cfg, "s2", "h4") in (["s2", "s1", "s4"], ["s2", "s3", "s4"])


def test_conflicting_paths_to_one_host_are_refused() -> None:
    raw = copy.deepcopy(RING)
    raw["paths"] = [{"dst": "h3", "via": ["s1", "s2", "s3"]}, {"dst": "h3", "via": ["s1", "s4", "s3"]}]
    with pytest.raises(ConfigError, match=r"paths\[1\].via: at s1 it leaves towards a different next hop"):
        parse_config(raw)


# -- cross-check with the packet tests' harness -----------------------------------------------


def test_entries_match_the_packet_tests_fixture() -> None:
    """The harness's job_entries (what the P4 packet tests install) equals ours for a job."""
    cfg = parse_config(TREE)
    d = desired_state(cfg, p4info())
    root = cfg.switch("root")
    children = [aggnet.Worker(0, 1, "10.0.255.2", "02:aa:00:00:00:02", is_switch=True),
                aggnet.Worker(2, 2, "10.0.255.3", "02:aa:00:00:00:03", is_switch=True)]
    theirs = aggnet.job_entries(aggnet.SwitchJob(
        job_id=7, index=1, table=[0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30],
        lane_bits=8, self_ip=root.addr, contributors=children, slot_base=8, num_slots=40, mcast_grp=2,
        token=0))   # desired_state without tokens (the controller passes its own)
    ours = [e for e in d["root"] if (isinstance(e, fy.P4MulticastGroupEntry) and e.multicast_group_id == 2)
            or (isinstance(e, fy.P4TableEntry) and e.match and e.match.get("job_id") == 7)]
    result = diff(ours, theirs, schema())
    assert (result.to_insert, result.to_modify, result.to_delete, result.foreign) == ([], [], [], [])
    assert result.unchanged == len(theirs) == len(ours) == 7
    assert all(e.metadata == OWNER_TAG for e in ours)



@pytest.mark.parametrize(("change", "field"), [
    ({"lane_bits": 7}, "lane_bits"), ({"num_slots": 0}, "num_slots")])
def test_job_entry_refuses_what_the_switch_refuses(change, field) -> None:
    """The controller checks its set_job parameters with the software target's own rules
    (host.protocol.jobs), so neither side accepts what the other refuses."""
    import dataclasses

    from control_plane.thc_validate import job_entry

    j = place(parse_config(TREE)).per_switch["root"][0]
    job_entry(j)
    with pytest.raises(ConfigError, match=field):
        job_entry(dataclasses.replace(j, **change))
