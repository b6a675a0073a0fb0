"""FIELDING clusters as in-network aggregation jobs, installed and reconciled by the controller.

Offline: the controller file built from a membership, stable job ids and slot ranges, and the
entries a migration touches. On the software target (``python -m host.softswitch`` on
loopback UDP, no root): two clusters aggregate at the same time, each to exactly the in-process
THC result of its own members; a migration of one client rewrites only the two affected jobs'
entries and moves its contributions to the other tree; the same driven by FIELDING's drift
detection.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from control_plane.fielding.clusterer import FieldingClusterer
from control_plane.fielding.config import FieldingConfig
from control_plane.fielding.network import (
    ClusterNetwork,
    job_entries,
    plan_network,
    touched_jobs,
)
from control_plane.reconcile import normalise
from host.softswitch.launch import free_port, spawn_process, stop_process, switch_command, wait_listening
from host.thc import THCCodec
from host.thc.simulate import allreduce as simulated_allreduce
from host.transport.job import NetworkAggregator, session_round_base
from host.transport.ports import UdpEndpoint
from tests.support.aggnet import P4_INFO, P4_JSON, Bmv2Network
from tests.support.frames import thc_frame, thc_only

CLIENTS = [f"c{i}" for i in range(8)]
IP = {c: f"127.0.0.{21 + i}" for i, c in enumerate(CLIENTS)}


def base_config(grpc_port: int = 9559) -> dict:
    """One software switch, one client per port (c<i> on port i+1)."""
    return {
        "switches": [{"name": "s1", "address": f"127.0.0.1:{grpc_port}", "addr": "127.0.0.254",
                      "target": "softswitch", "ports": len(CLIENTS)}],
        "hosts": [{"name": c, "mac": f"02:00:00:00:01:{i + 1:02x}", "ip": IP[c],
                   "attach": f"s1:{i + 1}"} for i, c in enumerate(CLIENTS)],
    }


THREE = {0: ["c2", "c0", "c1"], 1: ["c3", "c4", "c5"], 2: ["c6", "c7"]}
MIGRATED = {0: ["c0", "c1"], 1: ["c2", "c3", "c4", "c5"], 2: ["c6", "c7"]}


# -- offline ---------------------------------------------------------------------------------
def test_one_job_per_cluster_with_ranks_ids_and_slots():
    plan = plan_network(base_config(), {**THREE, 3: []}, job_id_base=200, num_slots=8)
    jobs = {j["name"]: j for j in plan.config["jobs"]}
    assert list(jobs) == ["fielding-c0", "fielding-c1", "fielding-c2"]  # empty cluster 3: no job
    assert jobs["fielding-c0"] == {"name": "fielding-c0", "id": 200, "members": ["c0", "c1", "c2"],
                                   "num_slots": 8, "slot_base": 0}
    assert [jobs[n]["slot_base"] for n in jobs] == [0, 8, 16]
    assert plan.jobs[0].rank("c2") == 2 and plan.job_of("c4").id == 201
    spec = plan.jobs[1].worker_spec("c5", round_base=77, token=0x5EED)
    assert (spec.job_id, spec.rank, spec.world, spec.num_slots, spec.round_base) == (201, 2, 3, 8, 77)
    cfg = plan.network_config()
    assert [(j.id, j.members) for j in cfg.jobs] == [
        (200, ("c0", "c1", "c2")), (201, ("c3", "c4", "c5")), (202, ("c6", "c7"))]
    assert [j.job_id for j in plan.diff.added] == ["fielding-c0", "fielding-c1", "fielding-c2"]


def test_migration_touches_only_the_two_jobs_entries():
    first = plan_network(base_config(), THREE)
    second = plan_network(base_config(), MIGRATED, previous=first)
    assert {c.job_id: (c.joined, c.left) for c in second.diff.changed} == {
        "fielding-c0": ((), ("c2",)), "fielding-c1": (("c2",), ())}
    assert second.diff.unchanged == ["fielding-c2"]
    # ranks follow the new membership; ids and slot ranges stay
    assert second.jobs[1].clients == ("c2", "c3", "c4", "c5") and second.jobs[1].rank("c3") == 1
    assert [(j.id, j.slot_base) for j in second.jobs.values()] == [
        (j.id, j.slot_base) for j in first.jobs.values()]
    before = job_entries(first.network_config())
    after = job_entries(second.network_config())
    assert touched_jobs(before, after) == ["fielding-c0", "fielding-c1"]
    assert before["fielding-c2"] == after["fielding-c2"] and before["<routes>"] == after["<routes>"]


def test_removed_cluster_frees_its_slots_and_survivors_keep_theirs():
    first = plan_network(base_config(), THREE, num_slots=32)
    # cluster 1 empties, a new cluster 5 appears: it takes the freed range, 0 and 2 stay put
    second = plan_network(base_config(), {0: ["c0", "c1", "c2", "c3"], 2: ["c6", "c7"],
                                          5: ["c4", "c5"]}, previous=first, num_slots=32)
    assert {c: j.slot_base for c, j in first.jobs.items()} == {0: 0, 1: 32, 2: 64}
    assert {c: j.slot_base for c, j in second.jobs.items()} == {0: 0, 2: 64, 5: 32}
    assert [j.job_id for j in second.diff.removed] == ["fielding-c1"]
    assert [j.job_id for j in second.diff.added] == ["fielding-c5"]
    # the controller's job index is the position in id order: cluster 2 keeps its members but
    # moves from index 2 to 1 (job entry and multicast group rewritten), a documented limit
    touched = touched_jobs(job_entries(first.network_config()), job_entries(second.network_config()))
    assert touched == ["fielding-c0", "fielding-c1", "fielding-c2", "fielding-c5"]


@pytest.mark.parametrize(
    ("clusters", "kwargs", "message"),
    [
        ({0: ["c0", "zz"]}, {}, "clusters[0]: client 'zz' maps to host 'zz'"),
        ({0: ["c0"], 1: ["c0", "c1"]}, {}, "client 'c0' is in clusters 0 and 1"),
        ({-1: ["c0"]}, {}, "cluster id -1 is not a non-negative integer"),
        ({"a": ["c0"]}, {}, "cluster id 'a' is not a non-negative integer"),
        ({70000: ["c0"]}, {}, "job_id_base: cluster 70000 would get job id 70100"),
        ({i: [c] for i, c in enumerate(CLIENTS)}, {"num_slots": 64}, "num_slots: 8 clusters x 64"),
        ({0: [f"x{i}" for i in range(33)]}, {}, "clusters[0]: 33 clients; one aggregation job"),
    ],
)
def test_bad_memberships_name_the_field(clusters, kwargs, message):
    with pytest.raises(ValueError) as exc:
        plan_network(base_config(), clusters, **kwargs)
    assert message in str(exc.value)


TREE = ("root", "leaf0", "leaf1")


def tree_base(grpc: dict[str, int] | None = None) -> dict:
    """Two leaves under a root: c0..c3 on leaf0 (ports 1-4), c4..c7 on leaf1; leaf port 5 up."""
    grpc = grpc or {n: 9560 + i for i, n in enumerate(TREE)}
    return {
        "switches": [{"name": n, "address": f"127.0.0.1:{grpc[n]}", "addr": f"10.0.255.{i + 1}",
                      "target": "softswitch"} for i, n in enumerate(TREE)],
        "hosts": [{"name": c, "mac": f"02:00:00:00:01:{i + 1:02x}", "ip": IP[c],
                   "attach": f"leaf{i // 4}:{i % 4 + 1}"} for i, c in enumerate(CLIENTS)],
        "links": [{"a": "leaf0:5", "b": "root:1"}, {"a": "leaf1:5", "b": "root:2"}],
    }


def test_each_cluster_gets_its_own_tree_and_a_migration_prunes_it():
    first = plan_network(tree_base(), {0: ["c0", "c1"], 1: ["c2", "c4", "c5"], 2: ["c6", "c7"]})
    second = plan_network(tree_base(), {0: ["c0", "c1", "c2"], 1: ["c4", "c5"], 2: ["c6", "c7"]},
                          previous=first)

    def trees(plan):
        return {j.name: {n.switch: n.parent for n in j.tree} for j in plan.network_config().jobs}

    assert trees(first) == {"fielding-c0": {"leaf0": None},
                            "fielding-c1": {"root": None, "leaf0": "root", "leaf1": "root"},
                            "fielding-c2": {"leaf1": None}}
    # c2 leaves cluster 1: its tree shrinks to leaf1, the root no longer serves any job
    assert trees(second)["fielding-c1"] == {"leaf1": None}
    before, after = job_entries(first.network_config()), job_entries(second.network_config())
    assert touched_jobs(before, after) == ["fielding-c0", "fielding-c1"]
    assert set(after["fielding-c1"]) == {"leaf1"} and "root" in before["fielding-c1"]
    assert before["fielding-c2"] == after["fielding-c2"]


def test_base_with_jobs_is_refused():
    with pytest.raises(ValueError, match=r"base\.jobs"):
        plan_network({**base_config(), "jobs": []}, THREE)


def test_a_switch_that_refuses_us_as_not_primary_is_retried_then_reported():
    """A closing read-only session may hold the switch's top election id for a moment."""
    import asyncio

    from control_plane.controller import NotPrimaryError, SwitchResult

    class Refusing:
        def __init__(self, refusals: int) -> None:
            self.cfg = plan_network(base_config(), THREE).network_config()
            self.refusals, self.calls = refusals, 0

        async def apply_switch(self, sw, prune=False):
            self.calls += 1
            if self.calls <= self.refusals:
                raise NotPrimaryError(f"{sw.name}: another controller is primary")
            return SwitchResult(sw.name, sw.address, writes=3)

    net = ClusterNetwork(base_config())
    net.primary_retries = 2
    ctl = Refusing(2)
    (res,) = asyncio.run(net._apply(ctl))
    assert res.ok and res.writes == 3 and ctl.calls == 3
    ctl = Refusing(3)
    (res,) = asyncio.run(net._apply(ctl))
    assert not res.ok and "another controller is primary" in res.error and ctl.calls == 3


# -- on the software target ------------------------------------------------------------------
class SoftSwitch:
    """``python -m host.softswitch`` with the given ``--port`` specs, stopped by PID."""

    def __init__(self, workdir: Path, name: str, ports: list[str]) -> None:
        self.grpc = free_port(socket.SOCK_STREAM)
        self.port: dict[str, int] = {}  # client -> UDP port, where the test sets it
        self.log = workdir / f"{name}.log"
        self.proc = spawn_process(switch_command(ports, self.grpc), self.log)

    def wait(self) -> SoftSwitch:
        wait_listening(self.proc, self.grpc, self.log)
        return self

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.fixture(scope="module")
def switch(tmp_path_factory):
    """One software switch, client c<i> on UDP port i+1; ``.port``: client -> UDP port."""
    port = {c: free_port() for c in CLIENTS}
    sw = SoftSwitch(tmp_path_factory.mktemp("fielding-net"), "s1",
                    [f"{i + 1}=udp:127.0.0.1:{port[c]}" for i, c in enumerate(CLIENTS)])
    sw.port.update(port)
    try:
        yield sw.wait()
    finally:
        sw.stop()


def tensors(seed: int, numel: int = 3000) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {c: torch.randn(numel, generator=g) * (1 + i) for i, c in enumerate(CLIENTS)}


def aggregate(port: dict[str, int], net: ClusterNetwork, cluster_ids, xs, codec) -> dict:
    """Every member of ``cluster_ids`` runs one allreduce, all clusters at once (threads).

    Returns ``client -> result``. A fresh round base per session: the switch keeps its slots'
    rounds across membership changes.
    """
    base = session_round_base()
    aggs = {}
    for cid in cluster_ids:
        job = net.plan.jobs[cid]
        for c in job.clients:
            ep = UdpEndpoint(("127.0.0.1", port[c]), bind=(IP[c], 0))
            aggs[c] = NetworkAggregator(ep, job.worker_spec(c, base, net.controller.tokens[job.id]))
    out: dict = {}
    errs: list = []

    def work(c: str) -> None:
        try:
            out[c] = aggs[c].allreduce(xs[c], codec)
        except BaseException as exc:  # re-raised below
            errs.append(exc)

    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in aggs]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "a worker hung"
    finally:
        for a in aggs.values():
            a.ep.close()
    if errs:
        raise errs[0]
    return out


def check_cluster_results(net: ClusterNetwork, out: dict, xs: dict, codec, cluster_ids) -> None:
    for cid in cluster_ids:
        job = net.plan.jobs[cid]
        # the in-process protocol over this cluster's tensors only, in rank order
        want = simulated_allreduce(codec, [xs[c] for c in job.clients], round=0).average
        for c in job.clients:
            assert torch.equal(out[c], want), (cid, c)


def delta(a: dict, b: dict) -> dict[int, int]:
    return {cid: b[cid]["s1"] - a[cid]["s1"] for cid in b}


def written_keys(results, schema) -> tuple[set, set]:
    """(key, value) of inserted/modified entries and keys of deleted ones, all switches."""
    put, gone = set(), set()
    for r in results:
        for e in (*r.diff.to_insert, *r.diff.to_modify):
            n = normalise(e, schema)
            put.add((n.key, n.value))
        for e in r.diff.to_delete:
            gone.add(normalise(e, schema).key)
    return put, gone


def test_two_clusters_aggregate_separately_and_a_migration_moves_one_client(switch):
    net = ClusterNetwork(base_config(switch.grpc))
    codec = THCCodec()
    first = net.update(THREE)
    assert first.writes > 0 and first.writes == first.writes_per_switch["s1"]
    assert net.update(THREE).writes == 0  # reconcile: nothing to do
    old_entries = job_entries(net.controller.cfg, net.p4info, net.controller.tokens)

    xs = tensors(1)
    c0 = net.contributions()
    out = aggregate(switch.port, net, [0, 1], xs, codec)
    check_cluster_results(net, out, xs, codec, [0, 1])
    # the clusters really are separate: A's result is not the average over all six
    mixed = simulated_allreduce(codec, [xs[c] for c in CLIENTS[:6]], round=0).average
    assert not torch.equal(out["c0"], mixed)
    d1 = delta(c0, net.contributions())
    per_worker = d1[0] // 3
    assert per_worker > 0 and d1 == {0: 3 * per_worker, 1: 3 * per_worker, 2: 0}

    # migrate c2 from cluster 0 to cluster 1
    upd = net.update(MIGRATED)
    assert upd.touched_jobs == ["fielding-c0", "fielding-c1"]
    assert upd.writes == upd.predicted_writes["s1"]
    total = sum(len(v) for v in old_entries["fielding-c0"].values()) + sum(
        len(v) for v in old_entries["fielding-c1"].values())
    assert 0 < upd.writes <= total < first.writes  # only the two jobs' entries, not a reinstall
    # cluster 0: job entry + group modified, c2's sender and member entries deleted (4);
    # cluster 1: job entry + group modified, member c2 inserted, and the sender entries of all
    # four re-keyed because ranks shift (c2 takes rank 0): 3 deleted, 4 inserted (10)
    assert upd.writes == 14
    new_entries = job_entries(net.controller.cfg, net.p4info, net.controller.tokens)
    put, gone = written_keys(upd.results, net.controller.schema)
    mine_new = new_entries["fielding-c0"]["s1"] | new_entries["fielding-c1"]["s1"]
    mine_old = {k for k, _ in old_entries["fielding-c0"]["s1"] | old_entries["fielding-c1"]["s1"]}
    assert put <= mine_new and gone <= mine_old
    untouched = {k for k, _ in new_entries["fielding-c2"]["s1"] | new_entries["<routes>"]["s1"]}
    assert not ({k for k, _ in put} | gone) & untouched
    assert new_entries["fielding-c2"] == old_entries["fielding-c2"]
    assert net.update(MIGRATED).writes == 0

    xs2 = tensors(2)
    c1 = net.contributions()
    out = aggregate(switch.port, net, [0, 1], xs2, codec)
    check_cluster_results(net, out, xs2, codec, [0, 1])
    assert net.plan.jobs[1].clients == ("c2", "c3", "c4", "c5")
    # c2's contribution now lands in cluster 1's sum
    want_b = simulated_allreduce(codec, [xs2[c] for c in ("c2", "c3", "c4", "c5")], round=0).average
    assert torch.equal(out["c2"], want_b) and torch.equal(out["c5"], want_b)
    assert d1 != (d2 := delta(c1, net.contributions()))
    assert d2 == {0: 2 * per_worker, 1: 4 * per_worker, 2: 0}


def _hist(major: int, drift: float = 0.0) -> np.ndarray:
    h = np.full(6, 0.02)
    h[major] = 0.9
    h[(major + 1) % 6] += drift
    return h / h.sum()


def test_drift_detection_migrates_a_client_between_trees(switch):
    """FIELDING sees c2's label histogram drift to the other group and migrates it."""
    clients = CLIENTS[:6]
    groups = {"c0": 0, "c1": 0, "c2": 0, "c3": 3, "c4": 3, "c5": 3}
    reps = {c: _hist(m, drift=0.01 * i) for i, (c, m) in enumerate(groups.items())}
    fc = FieldingClusterer(FieldingConfig(k_max=3, kmeans_n_init=2))
    assert fc.observe(reps).reason == "initial"
    a, b = fc.assignment["c0"], fc.assignment["c3"]
    assert a != b and sorted(fc.clusters[a]) == ["c0", "c1", "c2"]
    net = ClusterNetwork(base_config(switch.grpc), job_id_base=300)
    net.update(fc.clusters)

    upd = fc.observe({"c2": _hist(3, drift=0.02)})  # 1 of 6 drifted: migration, not re-clustering
    assert upd.reason == "migration" and upd.migrated == {"c2": (a, b)}
    changed = net.update(fc.clusters)
    assert changed.touched_jobs == sorted([f"fielding-c{a}", f"fielding-c{b}"])
    assert {c.job_id for c in changed.job_diff.changed} == set(changed.touched_jobs)
    assert 0 < changed.writes == changed.predicted_writes["s1"]

    xs = tensors(3)
    codec = THCCodec()
    before = net.contributions()
    out = aggregate(switch.port, net, [a, b], xs, codec)
    check_cluster_results(net, out, xs, codec, [a, b])
    assert net.plan.job_of("c2").cluster_id == b and set(out) == set(clients)
    d = delta(before, net.contributions())
    assert d[b] == 2 * d[a] > 0  # four contributors against two


@pytest.fixture
def tree_switches(tmp_path):
    """root, leaf0, leaf1 software targets; leaves linked to the root by tunnel ports."""
    port = {c: free_port() for c in CLIENTS}
    t = [free_port() for _ in range(4)]
    specs = {
        "root": [f"1=tunnel:127.0.0.1:{t[1]},peer=127.0.0.1:{t[0]}",
                 f"2=tunnel:127.0.0.1:{t[3]},peer=127.0.0.1:{t[2]}"],
        "leaf0": [f"{i + 1}=udp:127.0.0.1:{port[c]}" for i, c in enumerate(CLIENTS[:4])]
        + [f"5=tunnel:127.0.0.1:{t[0]},peer=127.0.0.1:{t[1]}"],
        "leaf1": [f"{i + 1}=udp:127.0.0.1:{port[c]}" for i, c in enumerate(CLIENTS[4:])]
        + [f"5=tunnel:127.0.0.1:{t[2]},peer=127.0.0.1:{t[3]}"],
    }
    sws = {n: SoftSwitch(tmp_path, n, sp) for n, sp in specs.items()}
    try:
        for sw in sws.values():
            sw.wait()
        yield sws, port
    finally:
        for sw in sws.values():
            sw.stop()


def test_a_cluster_spanning_the_tree_loses_its_root_after_a_migration(tree_switches):
    sws, port = tree_switches
    net = ClusterNetwork(tree_base({n: sw.grpc for n, sw in sws.items()}))
    codec = THCCodec()

    def counted(before, after):
        return {cid: {sw: after[cid][sw] - before[cid].get(sw, 0) for sw in after[cid]}
                for cid in after}

    net.update({0: ["c0", "c1"], 1: ["c2", "c4", "c5"]})  # cluster 1: leaf0 + leaf1 under root
    xs = tensors(4)
    c0 = net.contributions()
    out = aggregate(port, net, [0, 1], xs, codec)
    check_cluster_results(net, out, xs, codec, [0, 1])
    d = counted(c0, net.contributions())
    p = d[1]["leaf0"]  # packets per contributor: c2 alone at leaf0
    assert p > 0 and d == {0: {"leaf0": 2 * p}, 1: {"root": 2 * p, "leaf0": p, "leaf1": 2 * p}}

    upd = net.update({0: ["c0", "c1", "c2"], 1: ["c4", "c5"]})
    assert upd.touched_jobs == ["fielding-c0", "fielding-c1"]
    # cluster 1 leaves the root: its six table entries there are deleted. The software target
    # keeps no owner metadata on multicast groups, so the job's old groups (root, leaf0) stay
    # behind as foreign entries instead of being deleted (a target that keeps it: foreign = 0)
    assert upd.writes_per_switch["root"] == 6
    assert {sw: upd.writes_per_switch[sw] + upd.foreign_per_switch[sw] for sw in TREE} == \
        upd.predicted_writes
    assert [n.switch for n in net.controller.cfg.jobs[1].tree] == ["leaf1"]
    xs = tensors(5)
    c1 = net.contributions()
    out = aggregate(port, net, [0, 1], xs, codec)
    check_cluster_results(net, out, xs, codec, [0, 1])
    assert counted(c1, net.contributions()) == {0: {"leaf0": 3 * p}, 1: {"leaf1": 2 * p}}
    # as the switches' only writer the network may prune what it left behind
    net.prune = True
    pruned = net.update({0: ["c0", "c1", "c2"], 1: ["c4", "c5"]})
    assert pruned.writes == sum(upd.foreign_per_switch.values())
    assert all(r.diff.in_sync and not r.diff.foreign for r in net.status())


# -- on BMv2 ---------------------------------------------------------------------------------
BMV2_CLIENTS = CLIENTS[:6]


@pytest.fixture(scope="module")
def bmv2(tmp_path_factory):
    if not P4_JSON.exists():
        pytest.skip(f"{P4_JSON} missing (compile the P4 program)")
    net = Bmv2Network(tmp_path_factory.mktemp("fielding-bmv2"), prefix=f"nfn{os.getpid() % 10000}")
    net.add_switch("s1")
    for c in BMV2_CLIENTS:
        net.add_host(c, "s1")
    net.start()
    # The fixture keeps a P4Runtime session per switch (it pushed the pipeline). When a writer
    # leaves, BMv2 hands primary to that backup, which finsy then bids with the departed
    # writer's election id, so every later writer with the same id would be refused. The
    # cluster network is the only controller here: close the fixture's session.
    net.close_sessions()
    try:
        yield net
    finally:
        net.stop()


def bmv2_base(net) -> dict:
    sw = net.switches["s1"]
    return {
        "controller": {"election_id": 20, "p4info": str(P4_INFO), "bmv2_json": str(P4_JSON)},
        "switches": [{"name": "s1", "address": f"127.0.0.1:{sw.grpc_port}",
                      "addr": net.switch_ip("s1"), "mac": "02:00:00:00:ff:01"}],
        "hosts": [{"name": c, "mac": net.hosts[c].mac, "ip": net.hosts[c].ip,
                   "attach": f"s1:{net.hosts[c].port}"} for c in BMV2_CLIENTS],
    }


def bmv2_round(net, plan, cfg, rnd: int, seed: int, tokens: dict[int, int]) -> None:
    """Every member of every job sends one DATA (slot 0 of its job, round ``rnd``, the job's
    token) at once; each member must get its own cluster's exact sum of table values, count
    and bitmap."""
    from host.protocol import codec
    from host.protocol import layout as lay

    rng = np.random.default_rng(seed)
    idx = {c: rng.integers(0, 16, lay.COORDS_PER_PACKET) for c in BMV2_CLIENTS}
    for c in BMV2_CLIENTS:
        net.flush(c)
    for job in plan.jobs.values():
        for rank, c in enumerate(job.clients):
            hd = codec.Header(msg_type=lay.MsgType.DATA, job_id=job.id, slot=0, round=rnd, rank=rank,
                              token=tokens[job.id])
            net.send(c, thc_frame(net.hosts[c], net.switch_ip("s1"), hd, idx[c]))
    for job in plan.jobs.values():
        table = np.asarray(next(j for j in cfg.jobs if j.id == job.id).thc.table)
        want = np.sum([table[idx[c]] for c in job.clients], axis=0)
        for c in job.clients:
            got = thc_only(net.recv(c, count=1, timeout=3.0))
            assert len(got) == 1, f"{c}: no result for job {job.name} round {rnd}"
            m = got[0].msg
            assert m.msg_type is lay.MsgType.RESULT and m.header.job_id == job.id
            assert (m.header.count, m.header.bitmap) == (job.world, (1 << job.world) - 1)
            np.testing.assert_array_equal(m.values, want)


@pytest.mark.root
@pytest.mark.bmv2
def test_bmv2_two_clusters_and_a_migration(bmv2):
    net = ClusterNetwork(bmv2_base(bmv2))
    two = {0: ["c0", "c1", "c2"], 1: ["c3", "c4", "c5"]}
    moved = {0: ["c0", "c1"], 1: ["c2", "c3", "c4", "c5"]}
    assert net.update(two).writes > 0
    before = net.contributions()
    bmv2_round(bmv2, net.plan, net.controller.cfg, rnd=0, seed=1, tokens=net.controller.tokens)
    d1 = delta(before, net.contributions())
    assert d1 == {0: 3, 1: 3}

    upd = net.update(moved)
    assert upd.touched_jobs == ["fielding-c0", "fielding-c1"]
    assert upd.writes == upd.predicted_writes["s1"] == 14
    before = net.contributions()
    # c2 now in cluster 1's sum
    bmv2_round(bmv2, net.plan, net.controller.cfg, rnd=1, seed=2, tokens=net.controller.tokens)
    assert delta(before, net.contributions()) == {0: 2, 1: 4}
    assert net.update(moved).writes == 0
    for r in net.status():
        assert r.ok and not any(r.counters["ingress.drops"].values()), r.counters["ingress.drops"]
