"""Plan -> network (``control_plane.scaleacross.install``): pure, no switch, no root."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from control_plane import routing
from control_plane.cli.main import main as netco_main
from control_plane.config import ConfigError
from control_plane.scaleacross.install import (
    PlanError,
    _deal,
    install_files,
    install_plan,
    load_plan,
    read_topology,
)
from control_plane.scaleacross.netplan import build_network_plan
from control_plane.scaleacross.plan import resolve_plan
from control_plane.scaleacross.scenario import parse_scenario
from host.paths import REPO

DATA = Path(__file__).resolve().parent / "data"
TINY = yaml.safe_load((DATA / "tiny_two_buildings.yaml").read_text())
TOPO = read_topology(DATA / "two_uplinks.yaml")


def make_plan(links: int = 2, gpn: int = 2, gpus: int = 4, **parallel) -> dict:
    raw = copy.deepcopy(TINY)
    raw["cluster"]["cross_building"]["parallel_links"] = links
    raw["hardware"]["gpus_per_node"] = gpn
    for b in raw["cluster"]["buildings"]:
        b["gpus"] = gpus
    raw["parallel"].update(parallel)
    sc = parse_scenario(raw)
    return build_network_plan(sc, resolve_plan(sc))


def topo_with(**changes) -> dict:
    out = copy.deepcopy(TOPO)
    out.update(changes)
    return out


# a building of two leaves under a spine, twice, joined by one cross-building switch
TWO_LEVEL = {
    "switches": [{"name": n, "address": f"127.0.0.1:{60000 + i}", "addr": f"10.9.255.{i + 1}"}
                 for i, n in enumerate(["xc", "a-sp", "a-lf1", "a-lf2", "b-sp", "b-lf1", "b-lf2"])],
    "hosts": [{"name": f"{b}{k + 1}", "mac": f"02:00:00:00:09:{10 * (b == 'b') + k + 1:02x}",
               "ip": f"10.9.{1 + (b == 'b')}.{k + 1}", "attach": f"{b}-lf{k // 2 + 1}:{k % 2 + 1}"}
              for b in "ab" for k in range(4)],
    "links": [{"a": "a-lf1:3", "b": "a-sp:1"}, {"a": "a-lf2:3", "b": "a-sp:2"},
              {"a": "b-lf1:3", "b": "b-sp:1"}, {"a": "b-lf2:3", "b": "b-sp:2"},
              {"a": "a-sp:3", "b": "xc:1"}, {"a": "b-sp:3", "b": "xc:2"}],
}


def test_deal_follows_the_shares():
    assert _deal([0.5, 0.5], 4) == [0, 1, 0, 1]
    assert _deal([0.75, 0.25], 4).count(0) == 3
    assert _deal([1.0], 3) == [0, 0, 0]
    d = _deal([0.2, 0.3, 0.5], 10)
    assert [d.count(i) for i in range(3)] == [2, 3, 5]


def test_thc_plan_gives_a_job_per_dp_group_on_the_planned_uplink():
    plan = make_plan()
    inst = install_plan(plan, TOPO)
    assert inst.node_hosts == {"A-n0000": "a1", "A-n0001": "a2", "B-n0000": "b1", "B-n0001": "b2"}
    assert inst.rank_hosts == {0: "a1", 1: "a1", 2: "a2", 3: "a2", 4: "b1", 5: "b1", 6: "b2", 7: "b2"}
    jobs = {j.name: j for j in inst.config.jobs}
    assert set(jobs) == {"dp-pp0-tp0", "dp-pp0-tp1"}
    for name, root in (("dp-pp0-tp0", "x0"), ("dp-pp0-tp1", "x1")):
        j = jobs[name]
        assert j.tree_explicit and j.members == ("a1", "a2", "b1", "b2")
        assert {n.switch: n.parent for n in j.tree} == {"a-leaf": root, "b-leaf": root, root: None}
        info = next(x for x in inst.jobs if x["job"] == name)
        # each member host stands for the rank of this group on its node
        tp = int(name[-1])
        assert info["ranks"] == {"a1": [tp], "a2": [2 + tp], "b1": [4 + tp], "b2": [6 + tp]}
    assert [j.id for j in inst.config.jobs] == [1, 2]
    # in-network flows are carried by the trees: no routed path, default routing stays
    assert inst.config.paths == ()
    assert all(f["carried_by_jobs"] == ["dp-pp0-tp0", "dp-pp0-tp1"] for f in inst.flows)
    assert routing.path(inst.config, "a-leaf", "b2") == ["a-leaf", "x0", "b-leaf"]


def test_hierarchical_plan_routes_the_ring_over_the_dealt_uplinks():
    inst = install_plan(make_plan(dp_sync="hierarchical"), TOPO)
    vias = {p.dst: p.via for p in inst.config.paths}
    assert vias == {"b1": ("a-leaf", "x0", "b-leaf"), "b2": ("a-leaf", "x1", "b-leaf"),
                    "a1": ("b-leaf", "x0", "a-leaf"), "a2": ("b-leaf", "x1", "a-leaf")}
    assert routing.path(inst.config, "a-leaf", "b2") == ["a-leaf", "x1", "b-leaf"]
    assert routing.path(inst.config, "b-leaf", "a1") == ["b-leaf", "x0", "a-leaf"]
    # the building leaders' ring needs no cross switch: one job per group and building
    jobs = {j.name: j for j in inst.config.jobs}
    assert set(jobs) == {"dp-pp0-tp0-A", "dp-pp0-tp0-B", "dp-pp0-tp1-A", "dp-pp0-tp1-B"}
    assert [(n.switch, n.parent) for n in jobs["dp-pp0-tp1-B"].tree] == [("b-leaf", None)]
    assert jobs["dp-pp0-tp1-B"].members == ("b1", "b2")


def test_flat_ring_installs_paths_and_no_job():
    inst = install_plan(make_plan(dp_sync="ring"), TOPO)
    assert inst.config.jobs == ()
    assert len(inst.config.paths) == 4
    assert any("flat ring" in n for n in inst.notes)


def test_pp_crossing_routes_activations_and_keeps_dp_groups_in_their_building():
    inst = install_plan(make_plan(tp=2, pp=2, dp=2, cross="pp", dp_sync="ring"), TOPO)
    classes = {f["class"] for f in inst.flows}
    assert classes == {"pp_activations", "pp_gradients"}
    # stage 0 in A sends activations to B over the uplink dealt to each destination
    assert routing.path(inst.config, "a-leaf", "b1") == ["a-leaf", "x0", "b-leaf"]
    assert routing.path(inst.config, "a-leaf", "b2") == ["a-leaf", "x1", "b-leaf"]
    inst = install_plan(make_plan(tp=2, pp=2, dp=2, cross="pp", dp_sync="hierarchical"), TOPO)
    jobs = {j.name: j for j in inst.config.jobs}
    # a group that stays in its building: one job, no building suffix, one leaf
    assert jobs["dp-pp0-tp0"].members == ("a1", "a2") and jobs["dp-pp1-tp1"].members == ("b1", "b2")
    assert [n.switch for n in jobs["dp-pp1-tp1"].tree] == ["b-leaf"]


def test_pinned_plan_on_the_two_buildings_file_keeps_its_job():
    topo = read_topology(REPO / "mininet" / "two_buildings.yaml")
    inst = install_plan(make_plan(links=1), topo)
    jobs = {j.name: j for j in inst.config.jobs}
    assert set(jobs) == {"wan-job", "dp-pp0-tp0", "dp-pp0-tp1"}
    assert jobs["dp-pp0-tp0"].id == 5 and jobs["dp-pp0-tp1"].id == 6  # after the file's id 4
    assert jobs["dp-pp0-tp1"].members == ("h1", "h2", "h3", "h4")
    assert {n.switch: n.parent for n in jobs["dp-pp0-tp1"].tree} == {
        "a-leaf": "wan", "b-leaf": "wan", "wan": None}


def test_two_level_buildings_tree_and_paths_from_every_leaf():
    plan = make_plan(links=1, gpn=1, tp=1, dp=8)
    inst = install_plan(plan, TWO_LEVEL)
    (job,) = inst.config.jobs
    assert job.members == ("a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4")
    assert {n.switch: n.parent for n in job.tree} == {
        "a-sp": "xc", "a-lf1": "a-sp", "a-lf2": "a-sp",
        "b-sp": "xc", "b-lf1": "b-sp", "b-lf2": "b-sp", "xc": None}
    inst = install_plan(make_plan(links=1, gpn=1, tp=1, dp=8, dp_sync="hierarchical"), TWO_LEVEL)
    to_b3 = sorted(p.via for p in inst.config.paths if p.dst == "b3")
    assert to_b3 == [("a-lf1", "a-sp", "xc", "b-sp", "b-lf2"), ("a-lf2", "a-sp", "xc", "b-sp", "b-lf2"),
                     ("a-sp", "xc", "b-sp", "b-lf2")]
    assert {j.name for j in inst.config.jobs} == {"dp-pp0-tp0-A", "dp-pp0-tp0-B"}
    # in-building jobs: rooted at the building's spine, never at the cross switch
    assert {n.switch for j in inst.config.jobs for n in j.tree} == {
        "a-sp", "a-lf1", "a-lf2", "b-sp", "b-lf1", "b-lf2"}


def test_uplinks_to_different_cross_switches_are_refused_or_routed():
    topo = topo_with(switches=[*TOPO["switches"], {"name": "x2", "address": "127.0.0.1:50149",
                                                   "addr": "10.4.255.9"}],
                     links=[{"a": "a-leaf:3", "b": "x0:1"}, {"a": "a-leaf:4", "b": "x1:1"},
                            {"a": "b-leaf:3", "b": "x0:2"}, {"a": "b-leaf:4", "b": "x2:2"}])
    with pytest.raises(PlanError, match=r"aggregation_trees\[1\]: the uplinks chosen .*A-x1 -> x1, "
                                        r"B-x1 -> x2"):
        install_plan(make_plan(), topo)
    with pytest.raises(PlanError, match="x1 and x2 are not linked"):
        install_plan(make_plan(dp_sync="hierarchical"), topo)
    topo["links"].append({"a": "x1:3", "b": "x2:3"})
    inst = install_plan(make_plan(dp_sync="hierarchical"), topo)
    assert {p.dst: p.via for p in inst.config.paths}["b2"] == ("a-leaf", "x1", "x2", "b-leaf")


def test_errors_name_the_field_and_the_fix(tmp_path):
    # more plan nodes than hosts in a building
    with pytest.raises(PlanError, match=r"topology hosts: the plan runs building A's ranks on 4 "
                                        r"nodes \(A-n0000..A-n0003\) but building A has 2"):
        install_plan(make_plan(gpn=1, tp=1, dp=8), TOPO)
    # no switch named after a building
    renamed = yaml.safe_load(yaml.safe_dump(TOPO).replace("b-leaf", "right"))
    with pytest.raises(PlanError, match=r"no switch of plan building B; name building B's switches 'b-"):
        install_plan(make_plan(), renamed)
    # fewer uplinks than the plan's parallel links
    with pytest.raises(PlanError, match=r"uplink A-x1 needs at least 2 link\(s\).*has 1 \(a-leaf-wan\)"):
        install_plan(make_plan(), read_topology(REPO / "mininet" / "two_buildings.yaml"))
    # a plan rank in an unknown building
    bad = make_plan()
    bad["ranks"][3]["building"] = "Z"
    with pytest.raises(PlanError, match=r"plan ranks\[3\].building: unknown building 'Z'"):
        install_plan(bad, TOPO)
    # a job name the file already uses
    clash = topo_with(jobs=[{"name": "dp-pp0-tp0", "id": 9, "members": ["a1", "b1"]}])
    with pytest.raises(PlanError, match="a job named dp-pp0-tp0 is already in the file"):
        install_plan(make_plan(), clash)
    # an explicit host map that puts a node in the wrong building
    with pytest.raises(PlanError, match=r"host_map\[A-n0000\]: b1 attaches to b-leaf"):
        install_plan(make_plan(), TOPO, host_map={"A-n0000": "b1", "A-n0001": "a2",
                                                 "B-n0000": "a1", "B-n0001": "b2"})
    # the merged state is validated by the controller's own rules
    with pytest.raises(ConfigError, match=r"jobs\[0\].thc.g"):
        install_plan(make_plan(), TOPO, thc={"g": 9999})
    # plan file version
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({**make_plan(), "version": 2}))
    with pytest.raises(PlanError, match="version: 2; this controller reads version 1"):
        load_plan(p)
    p.write_text("{")
    with pytest.raises(PlanError, match="not valid JSON"):
        load_plan(p)


def test_host_map_overrides_the_convention():
    inst = install_plan(make_plan(), TOPO, host_map={"A-n0000": "a2", "A-n0001": "a1",
                                                     "B-n0000": "b2", "B-n0001": "b1"})
    assert inst.rank_hosts[0] == "a2"
    assert inst.config.jobs[0].members == ("a2", "a1", "b2", "b1")


def test_controller_cli_takes_the_plan(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(make_plan(dp_sync="hierarchical")))
    topo = DATA / "two_uplinks.yaml"
    assert install_files(topo, plan).config.paths
    assert netco_main(["controller", "show", str(topo), "--plan", str(plan), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["jobs"]) == {"dp-pp0-tp0-A", "dp-pp0-tp0-B", "dp-pp0-tp1-A", "dp-pp0-tp1-B"}
    assert out["plan"]["node_hosts"]["B-n0001"] == "b2"
    assert netco_main(["controller", "show", str(topo), "--plan", str(plan)]) == 0
    assert "to b2 via a-leaf x1 b-leaf" in capsys.readouterr().out
    plan.write_text(json.dumps({"version": 7}))
    assert netco_main(["controller", "show", str(topo), "--plan", str(plan)]) == 2
    assert "version: 7" in capsys.readouterr().err


def test_notes_for_what_the_network_cannot_take_literally():
    # a node holding two ranks of one group joins once, with the sum of its ranks
    inst = install_plan(make_plan(gpn=2, tp=1, dp=8), TOPO)
    (job,) = inst.jobs
    assert job["ranks"] == {"a1": [0, 1], "a2": [2, 3], "b1": [4, 5], "b2": [6, 7]}
    assert any("a1: ranks 0, 1" in n and "contributes once" in n for n in inst.notes)
    # uncompressed in-network aggregation runs as THC on netco switches
    inst = install_plan(make_plan(dp_sync="ina"), TOPO)
    assert len(inst.config.jobs) == 2 and all("installed as a THC job" in n for n in inst.notes)
    assert install_plan(make_plan(), TOPO).notes == []
