"""FieldingStrategy with mock replies (as Flower tests its strategies) and one local run."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid

from control_plane.fielding.config import FieldingConfig
from control_plane.fielding.flower import (
    QUERY_REPRESENTATION,
    REPR_KEY,
    FieldingStrategy,
    pack,
    run_local,
    set_task_identity,
    unpack,
)


@pytest.fixture(autouse=True)
def _identity():
    set_task_identity()


class MockGrid(Grid):
    """Answers representation queries from a table; never used for train messages."""

    def __init__(self, reps: dict[int, np.ndarray | None]):
        self.reps = reps
        self.sent: list[Message] = []

    def set_run(self, run):  # pragma: no cover
        pass

    @property
    def run(self):  # pragma: no cover
        return None

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id=dst_node_id, message_type=message_type)

    def get_node_ids(self):
        return list(self.reps)

    def push_messages(self, messages):  # pragma: no cover
        raise NotImplementedError

    def pull_messages(self, message_ids):  # pragma: no cover
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        out = []
        for m in messages:
            self.sent.append(m)
            assert m.metadata.message_type == QUERY_REPRESENTATION
            rep = self.reps[m.metadata.dst_node_id]
            content = RecordDict()
            if rep is not None:
                content[REPR_KEY] = ArrayRecord(array_dict={"rep": Array(rep)})
            out.append(Message(content, reply_to=m))
        return out


def _reps():
    a, b = np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0])
    return {10: a, 11: a + 0.01, 12: a + 0.02, 20: b, 21: b + 0.01, 22: b + 0.02}


def _reply(msg: Message, w: np.ndarray, n: int, loss: float = 1.0) -> Message:
    return Message(RecordDict({
        "arrays": ArrayRecord(array_dict={"w": Array(w)}),
        "metrics": MetricRecord({"num-examples": n, "train_loss": loss}),
    }), reply_to=msg)


def test_pack_unpack_roundtrip():
    models = {0: {"w": np.arange(3.0)}, 7: {"w": np.ones(3), "b": np.zeros(1)}}
    back = unpack(pack(models))
    assert set(back) == {0, 7}
    assert np.allclose(back[7]["w"], 1) and np.allclose(back[0]["w"], [0, 1, 2])
    assert unpack(ArrayRecord(array_dict={"w": Array(np.ones(2))})) is None


def test_configure_train_sends_cluster_models():
    strat = FieldingStrategy(FieldingConfig(tau=0.1))
    grid = MockGrid(_reps())
    init = ArrayRecord(array_dict={"w": Array(np.zeros(4))})
    msgs = list(strat.configure_train(1, init, ConfigRecord({"lr": 0.1}), grid))
    assert len(grid.sent) == 6  # one query per node
    assert {m.metadata.dst_node_id for m in msgs} == set(_reps())
    clusters = {m.metadata.dst_node_id: m.content["config"]["cluster-id"] for m in msgs}
    assert clusters[10] == clusters[11] == clusters[12] != clusters[20]
    assert clusters[20] == clusters[21] == clusters[22]
    assert all(m.content["config"]["lr"] == 0.1 for m in msgs)
    assert all(np.allclose(m.content["arrays"]["w"].numpy(), 0) for m in msgs)


def test_aggregate_train_is_fedavg_per_cluster():
    strat = FieldingStrategy(FieldingConfig(tau=0.1))
    init = ArrayRecord(array_dict={"w": Array(np.zeros(2))})
    msgs = list(strat.configure_train(1, init, ConfigRecord(), MockGrid(_reps())))
    by_node = {m.metadata.dst_node_id: m for m in msgs}
    replies = [
        _reply(by_node[10], np.array([1.0, 1.0]), 10),
        _reply(by_node[11], np.array([4.0, 4.0]), 30),
        _reply(by_node[12], np.array([0.0, 0.0]), 0 + 60),
        _reply(by_node[20], np.array([-2.0, 2.0]), 5),
        _reply(by_node[21], np.array([-2.0, 2.0]), 5),
        Message(error=Error(code=0, reason="client crashed"), reply_to=by_node[22]),
    ]
    arrays, metrics = strat.aggregate_train(1, replies)
    models = unpack(arrays)
    ca = by_node[10].content["config"]["cluster-id"]
    cb = by_node[20].content["config"]["cluster-id"]
    assert np.allclose(models[ca]["w"], (1 * 10 + 4 * 30 + 0 * 60) / 100)
    assert np.allclose(models[cb]["w"], [-2, 2])
    assert metrics["clusters"] == 2 and metrics["num-examples"] == 110
    # next round: the packed record comes back through Flower's loop; no drift -> same models
    msgs2 = list(strat.configure_train(2, arrays, ConfigRecord(),
                                       MockGrid({n: None for n in _reps()})))
    w10 = next(m for m in msgs2 if m.metadata.dst_node_id == 10).content["arrays"]["w"]
    assert np.allclose(w10.numpy(), 1.3)


def test_reply_without_weight_is_an_error():
    strat = FieldingStrategy()
    init = ArrayRecord(array_dict={"w": Array(np.zeros(2))})
    msgs = list(strat.configure_train(1, init, ConfigRecord(), MockGrid(_reps())))
    bad = Message(RecordDict({"arrays": ArrayRecord(array_dict={"w": Array(np.ones(2))}),
                              "metrics": MetricRecord({"train_loss": 1.0})}), reply_to=msgs[0])
    with pytest.raises(ValueError, match="num-examples"):
        strat.aggregate_train(1, [bad])


def test_drifted_node_migrates_and_gets_other_model():
    strat = FieldingStrategy(FieldingConfig(tau=0.1, theta=0.5))
    init = ArrayRecord(array_dict={"w": Array(np.zeros(2))})
    msgs = list(strat.configure_train(1, init, ConfigRecord(), MockGrid(_reps())))
    by_node = {m.metadata.dst_node_id: m for m in msgs}
    replies = [_reply(m, np.full(2, 1.0 if n < 20 else -1.0), 10) for n, m in by_node.items()]
    arrays, _ = strat.aggregate_train(1, replies)
    reps = {n: None for n in _reps()}
    reps[10] = np.array([0.0, 0.0, 1.0])  # node 10 drifts to the other group
    msgs2 = list(strat.configure_train(2, arrays, ConfigRecord(), MockGrid(reps)))
    m10 = next(m for m in msgs2 if m.metadata.dst_node_id == 10)
    assert np.allclose(m10.content["arrays"]["w"].numpy(), -1.0)
    assert strat.updates[-1].reason == "migration"


def test_end_to_end_with_flower_start_loop():
    out = run_local("concept", n_clients=8, rounds=5, seed=0)
    assert len(out["accuracy"]) == 5
    assert out["accuracy"][-1] > 0.5  # 10 classes: chance is 0.1
    assert max(out["clusters"]) >= 2
    assert out["representation_bytes"] < out["bytes_from_clients"] / 10

