"""FIELDING on Flower's real engines, and in-network FL aggregation in a Flower run.

* Simulation engine (``flwr.simulation.run_simulation``, Ray backend) with 100 virtual clients.
* Deployment engine: a SuperLink and one SuperNode per client as separate processes, started
  with Flower's own CLI (``flower-superlink``, ``flower-supernode``) and the app submitted with
  ``flwr run`` (:class:`control_plane.fielding.deploy.Deployment`).
* In-network aggregation on the deployment engine: each cluster's updates are summed by its
  THC job on the software target; the server receives one sum per cluster; the new models are
  bit-identical to the in-process THC all-reduce of the members' updates and within THC's error
  of Python FedAvg; FIELDING's migration and re-clustering move clients between jobs.

No engine is mocked here. The deployment tests take about two minutes each on 2 cores (one
``flwr-clientapp`` process per message, as Flower's subprocess isolation runs them).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from control_plane.fielding.deploy import Deployment, _scenario
from control_plane.fielding.flower_network import host_name
from control_plane.fielding.models import LocalTraining, Model, local_train
from host.thc import THCCodec
from host.thc.simulate import allreduce as simulated_allreduce
from tests.support.aggnet import P4_INFO, P4_JSON, Bmv2Network

N_CLIENTS, ROUNDS = 8, 3
#: bytes of one client's model (softmax regression on digits: 65 x 10 float64)
MODEL_BYTES = 65 * 10 * 8
#: one THC encode/decode has NMSE ~0.02 (docs/thc.md); a cluster's average is no worse
THC_NMSE_BOUND = 0.05


@pytest.mark.slow
def test_simulation_engine_with_100_clients():
    pytest.importorskip("ray", reason="Flower's simulation engine needs Ray: "
                        "pip install 'flwr[simulation]' (netco's simulation extra)")
    from control_plane.fielding.flower import run_engine

    out = run_engine("concept", n_clients=100, rounds=3, seed=0)
    assert out["engine"].startswith("flwr.simulation.run_simulation")
    assert out["trained_per_round"] == [100, 100, 100] and out["trained_nodes"] == 100
    assert out["train_array_bytes"] == [100 * MODEL_BYTES] * 3  # every update to the server
    assert out["reclusterings"][0] == "initial" and max(out["clusters"]) >= 2
    assert out["accuracy"][-1] > 0.5  # 10 classes: chance is 0.1


def _started(dep: Deployment) -> list:
    return [proc for _, proc, _ in dep.procs]


@pytest.mark.slow
def test_deployment_engine_superlink_and_supernodes(tmp_path):
    dep = Deployment(tmp_path, N_CLIENTS)
    with dep:
        procs = _started(dep)
        names = [n for n, _, _ in dep.procs]
        assert names == ["superlink", *(f"supernode-{i}" for i in range(N_CLIENTS))]
        out = dep.run(rounds=ROUNDS)
    assert all(p.poll() is not None for p in procs)  # every process it started has ended
    assert out["engine"].startswith("flwr deployment engine") and not out["in_network"]
    assert out["trained_per_round"] == [N_CLIENTS] * ROUNDS
    assert out["trained_nodes"] == N_CLIENTS
    assert out["train_array_bytes"] == [N_CLIENTS * MODEL_BYTES] * ROUNDS
    assert out["reclusterings"][0] == "initial" and max(out["clusters"]) >= 2
    assert out["accuracy"][-1] > 0.5


def _member_updates(sc, partitions, w, rnd):
    """Each member's local training, as its ClientApp runs it (make_client_app's defaults)."""
    models, weights = [], []
    for pid in partitions:
        d = sc.data(pid, rnd)
        m = Model(d.X_train.shape[1], 10)
        models.append(local_train(m, w, d.X_train, d.y_train, LocalTraining(epochs=3, lr=0.5),
                                  np.random.default_rng(pid * 1000 + rnd)))
        weights.append(len(d.y_train))
    return models, weights


@pytest.mark.slow
def test_in_network_aggregation_in_a_deployment_run(tmp_path):
    dep = Deployment(tmp_path, N_CLIENTS, in_network=True)
    with dep:
        procs = _started(dep)
        assert [n for n, _, _ in dep.procs][:2] == ["softswitch", "superlink"]
        out = dep.run(rounds=ROUNDS)
    assert all(p.poll() is not None for p in procs)
    check_in_network_run(out)


def check_in_network_run(out: dict) -> None:
    """One sum per cluster to the server, bit-exact THC sums, FedAvg within THC's error, and
    clients moving between jobs with only the affected entries rewritten."""
    assert out["in_network"] and out["trained_per_round"] == [N_CLIENTS] * ROUNDS
    # the server receives one sum per cluster, not every client's model
    assert out["train_array_bytes"] == [c * MODEL_BYTES for c in out["clusters"]]
    assert all(c < N_CLIENTS for c in out["clusters"])
    sc = _scenario("concept", N_CLIENTS, ROUNDS, 0)
    codec = THCCodec()
    jobs_of = []
    for rec in out["network"]:
        rnd = rec["round"]
        assert set(rec["clusters"]) == {str(c) for c in range(out["clusters"][rnd - 1])}
        for c in rec["clusters"].values():
            w = np.asarray(c["sent"]["w"])
            got = np.asarray(c["result"]["w"])
            models, weights = _member_updates(sc, c["partitions"], w, rnd)
            assert c["weight"] == sum(weights)
            # bit for bit the in-process THC all-reduce of the members' weighted updates
            xs = [torch.from_numpy((n * (m - w)).astype(np.float32))
                  for m, n in zip(models, weights, strict=True)]
            thc = simulated_allreduce(codec, xs, round=0).average.double().numpy()
            np.testing.assert_allclose(got, w + thc * len(xs) / sum(weights), rtol=0, atol=1e-12)
            # and Python FedAvg within THC's error
            fedavg = sum(n * m for m, n in zip(models, weights, strict=True)) / sum(weights)
            nmse = np.sum((got - fedavg) ** 2) / np.sum((fedavg - w) ** 2)
            assert 0 < nmse < THC_NMSE_BOUND, (rnd, c["partitions"], nmse)
        jobs_of.append({p: cid for cid, c in rec["clusters"].items() for p in c["partitions"]})
    # FIELDING moved clients between jobs mid-run, and the controller rewrote only what changed
    moved = [p for p in range(N_CLIENTS) if len({j[p] for j in jobs_of}) > 1]
    assert moved, jobs_of
    first, later = out["network"][0], out["network"][1:]
    assert "<routes>" in first["touched_jobs"]
    for rec, before, after in zip(later, jobs_of[:-1], jobs_of[1:], strict=True):
        if before != after:
            assert 0 < rec["writes"] < first["writes"] and "<routes>" not in rec["touched_jobs"]
    assert out["accuracy"][-1] > 0.5


SWITCH_MAC = "02:00:00:00:ff:01"


@pytest.fixture
def bmv2_target(tmp_path):
    """BMv2 with hosts p0..p7 on veth links in their namespaces, as a Deployment target."""
    if not P4_JSON.exists():
        pytest.skip(f"{P4_JSON} missing (compile the P4 program: ./dev.sh p4)")
    net = Bmv2Network(tmp_path / "bmv2", prefix=f"nff{os.getpid() % 10000}")
    net.add_switch("s1")
    names = [host_name(p) for p in range(N_CLIENTS)]
    for h in names:
        net.add_host(h, "s1")
    net.start()
    net.close_sessions()  # the cluster network is the switch's only controller
    try:
        sw_ip = net.switch_ip("s1")
        base = {"controller": {"election_id": 20, "p4info": str(P4_INFO), "bmv2_json": str(P4_JSON)},
                "switches": [{"name": "s1", "address": f"127.0.0.1:{net.switches['s1'].grpc_port}",
                              "addr": sw_ip, "mac": SWITCH_MAC}],
                "hosts": [{"name": h, "mac": net.hosts[h].mac, "ip": net.hosts[h].ip,
                           "attach": f"s1:{net.hosts[h].port}"} for h in names]}
        nodes = [{"partition-id": p, "num-partitions": N_CLIENTS, "netns": net._host_ns[h],
                  "iface": net._host_if[h], "mac": net.hosts[h].mac, "ip": net.hosts[h].ip,
                  "switch-mac": SWITCH_MAC, "switch-ip": sw_ip} for p, h in enumerate(names)]
        yield SimpleNamespace(base=base, node_configs=nodes, net=net)
    finally:
        net.stop()


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bmv2
def test_in_network_aggregation_on_bmv2_in_a_deployment_run(tmp_path, bmv2_target):
    dep = Deployment(tmp_path / "flwr", N_CLIENTS, target=bmv2_target)
    with dep:
        procs = _started(dep)
        assert dep.procs[0][0] == "superlink"  # no software switch started here
        out = dep.run(rounds=ROUNDS)
    assert all(p.poll() is not None for p in procs)
    check_in_network_run(out)
