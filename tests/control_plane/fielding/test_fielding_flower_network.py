"""In-network FL aggregation, the fast parts: the software-target layout, the sum -> model
arithmetic, the strategy's in-network aggregation from replies, and the client's one-line
errors. The Flower runs are in ``test_fielding_flower_engines.py``."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from control_plane.fielding.flower import FieldingStrategy, set_task_identity, unpack
from control_plane.fielding.flower_network import (
    InNetworkAggregation,
    host_ip,
    network_train,
    software_target,
)
from control_plane.fielding.network import plan_network


@pytest.fixture(autouse=True)
def _identity():
    set_task_identity()


def test_software_target_layout_is_a_valid_controller_file():
    t = software_target(3, 9559, [40001, 40002, 40003])
    assert t.port_specs == ["1=udp:127.0.0.1:40001", "2=udp:127.0.0.1:40002",
                            "3=udp:127.0.0.1:40003"]
    assert t.node_configs[2] == {"partition-id": 2, "num-partitions": 3,
                                 "switch-udp": "127.0.0.1:40003", "bind-ip": "127.0.1.3"}
    plan = plan_network(t.base, {0: ["p0", "p2"], 1: ["p1"]})
    assert plan.network_config().jobs[0].members == ("p0", "p2")
    with pytest.raises(ValueError, match="udp_ports"):
        software_target(3, 9559, [1, 2])
    with pytest.raises(ValueError, match="partition-id 300"):
        host_ip(300)


def test_apply_is_fedavg_from_the_sum_and_a_missing_sum_keeps_the_model():
    agg = InNetworkAggregation(software_target(2, 9559, [1, 2]).base)
    w = {"w": np.array([1.0, 2.0])}
    models = {0: w, 1: {"w": np.zeros(2)}}
    # two members, n = 10 and 30, updates +1 and +3: FedAvg moves w by (10*1 + 30*3) / 40
    out = agg.apply(models, {0: {"w": np.array([100.0, 100.0])}}, {0: 40.0, 1: 5.0}, {})
    np.testing.assert_allclose(out[0]["w"], [3.5, 4.5])
    assert out[1] is models[1]  # no sum came back for cluster 1


def _reply(msg_to: Message, n: int, total: np.ndarray | None) -> Message:
    content = RecordDict({"metrics": MetricRecord({"num-examples": n, "train_loss": 1.0})})
    if total is not None:
        content["arrays"] = ArrayRecord(array_dict={"w": Array(total)})
    return Message(content, reply_to=msg_to)


def test_strategy_aggregates_in_network_from_one_sum_per_cluster():
    # nothing installed: only the sum -> model step of the network object runs
    strat = FieldingStrategy(network=InNetworkAggregation(software_target(3, 9559, [1, 2, 3]).base))
    strat.models = {0: {"w": np.zeros(2)}, 1: {"w": np.ones(2)}}
    strat.sent_to = {10: 0, 11: 0, 20: 1}
    sent = {n: Message(RecordDict({"config": ConfigRecord({"x": 1})}), dst_node_id=n,
                       message_type="train") for n in strat.sent_to}
    replies = [_reply(sent[10], 10, np.array([20.0, 40.0])), _reply(sent[11], 30, None),
               _reply(sent[20], 5, np.array([5.0, -5.0]))]
    arrays, metrics = strat.aggregate_train(1, replies)
    models = unpack(arrays)
    np.testing.assert_allclose(models[0]["w"], [0.5, 1.0])   # sum / (10 + 30)
    np.testing.assert_allclose(models[1]["w"], [2.0, 0.0])   # 1 + sum / 5
    assert metrics["num-examples"] == 45 and metrics["clusters"] == 2
    assert strat.trained == [[10, 11, 20]]
    assert strat.train_array_bytes == [2 * 2 * 8]  # two sums, not three models


def test_client_without_switch_address_gets_one_line():
    cfg = {"job-id": 100, "rank": 0, "world": 1, "num-slots": 8, "granularity": 30,
           "round-base": 1, "token": 1}
    with pytest.raises(ValueError, match=r"switch-udp missing.*--node-config"):
        network_train(cfg, {"partition-id": 0}, np.zeros(3))


def test_deploy_cli_bad_flags_are_one_line(capsys):
    from control_plane.cli.main import main

    assert main(["fielding", "deploy", "--clients", "3"]) == 2
    assert main(["fielding", "deploy", "--rounds", "2", "--in-network"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--clients 3: need 8..60" in err[0] and "--rounds 2" in err[1]
    assert "Traceback" not in "".join(err)


def test_deploy_table_and_brief_json():
    from control_plane.fielding.deploy_cli import brief, table

    res = {"rounds": 2, "accuracy": [0.5, 0.75], "clusters": [2, 3], "trained_per_round": [8, 8],
           "train_reply_bytes": [12000, 17000], "trained_nodes": 8, "in_network": True,
           "engine": "flwr deployment engine (SuperLink + SuperNodes)",
           "network": [{"round": 1, "writes": 30, "touched_jobs": ["<routes>", "fielding-c0"],
                        "clusters": {"0": {"partitions": [0, 1], "weight": 60.0,
                                           "sent": {"w": [0.0]}, "result": {"w": [1.0]}}}},
                       {"round": 2, "writes": 0, "touched_jobs": [], "clusters": {}}]}
    lines = table(res)
    assert lines[0].split()[:5] == ["round", "accuracy", "clusters", "trained", "reply"]
    assert lines[1].split() == ["1", "0.5000", "2", "8", "12,000", "30", "<routes>,", "fielding-c0"]
    assert lines[2].split()[-2:] == ["0", "-"]
    assert "in-network" in lines[3] and "total 29,000" in lines[4]
    assert brief(res)["network"][0]["clusters"] == {"0": {"partitions": [0, 1], "weight": 60.0}}
