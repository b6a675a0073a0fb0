"""Two-level aggregation tree: leaf0 (a0, a1) and leaf1 (b0, b1) under root.

Each leaf sums its workers, sends the partial to the root as one contributor, and fans the
root's result out to its workers (docs/protocol.md, "Aggregation tree").
"""

from __future__ import annotations

import numpy as np
import pytest

from host.protocol import codec
from host.protocol import layout as lay
from host.protocol.layout import DropReason, Flag, MsgType
from tests.support.aggnet import AggregationNetwork, SwitchJob
from tests.support.frames import collect, thc_frame, thc_only, wait_count
from tests.support.jobs import TABLE
from tests.support.token import TOKEN
from tests.support.tree import HOSTS, LEAF, RANKS, full_round, install_tree_job, send_data

C = lay.COORDS_PER_PACKET


@pytest.fixture(scope="module")
def tree_job(tree: AggregationNetwork) -> SwitchJob:
    """Job 7 installed on all three switches (16-bit lanes, n = 4)."""
    return install_tree_job(tree)


def test_tree_sums_exactly(tree, tree_job):
    net = tree
    rng = np.random.default_rng(1)
    for rnd in range(2):
        got, want = full_round(net, rng, 0, rnd)
        for h in HOSTS:
            assert len(got[h]) == 1, f"{h}: {len(got[h])} results in round {rnd}"
            r = got[h][0]
            assert r.msg.msg_type is MsgType.RESULT and r.msg.header.round == rnd
            assert r.msg.header.count == 4 and r.msg.header.bitmap == 0b1111
            assert r.dst_ip == net.hosts[h].ip and r.src_ip == net.switch_ip(LEAF[h])
            np.testing.assert_array_equal(r.msg.values, want)


def test_tree_norm_maximum(tree, tree_job):
    net = tree
    rng = np.random.default_rng(2)
    norms = {h: rng.uniform(0, 50, lay.NORMS_PER_PACKET).astype(np.float32) for h in HOSTS}
    for h in HOSTS:
        hd = codec.Header(token=TOKEN, msg_type=MsgType.NORM, job_id=7, slot=1, round=0, rank=RANKS[h],
                          lane_bits=32)
        net.send(h, thc_frame(net.hosts[h], net.switch_ip(LEAF[h]), hd, norms[h]))
    got = collect(net, HOSTS, more=4)
    for h in HOSTS:
        assert len(got[h]) == 1 and got[h][0].msg.msg_type is MsgType.NORM_RESULT
        assert got[h][0].msg.header.count == 4
        np.testing.assert_array_equal(got[h][0].msg.values, np.max(list(norms.values()), axis=0))


def test_tree_retransmissions_never_double_count(tree, tree_job):
    net = tree
    rng = np.random.default_rng(3)
    t = np.asarray(TABLE)
    idxs = {h: rng.integers(0, 16, C) for h in HOSTS}
    send_data(net, "a0", 2, 0, idxs["a0"])
    send_data(net, "a1", 2, 0, idxs["a1"])       # leaf0 complete: partial goes up
    assert wait_count(net, net.hosts["a0"], net.switch_ip("leaf0"), 7, 0, 2, 0, want=2) == 2
    root_before = net.drop_counts("root")
    send_data(net, "a0", 2, 0, idxs["a0"], flags=Flag.RETX)  # leaf0 re-sends its partial
    assert thc_only(net.recv("a0", count=1, timeout=0.5)) == []
    assert {DropReason(k): v - root_before.get(k, 0) for k, v in net.drop_counts("root").items()
            if v != root_before.get(k, 0)} == {DropReason.DUPLICATE: 1}
    send_data(net, "b0", 2, 0, idxs["b0"])
    send_data(net, "b1", 2, 0, idxs["b1"])
    got = collect(net, HOSTS, more=4)
    want = np.sum([t[i] for i in idxs.values()], axis=0)
    for h in HOSTS:
        assert len(got[h]) == 1 and got[h][0].msg.header.count == 4
        np.testing.assert_array_equal(got[h][0].msg.values, want)
    # The leaf stored the root's result: b1's retransmission is answered by leaf1 alone.
    send_data(net, "b1", 2, 0, idxs["b1"], flags=Flag.RETX)
    got = collect(net, HOSTS, more=4, timeout=1.0)
    assert [len(got[h]) for h in HOSTS] == [0, 0, 0, 1]
    r = got["b1"][0]
    assert r.msg.header.flags & Flag.RESENT and r.msg.header.count == 4
    np.testing.assert_array_equal(r.msg.values, want)


def test_tree_new_session_far_ahead_passes_start_to_the_root(tree, tree_job):
    """Issue 16: a session's first round may be far ahead of the copies' (START); a leaf passes
    START on in its partial, so the root opens its copy too instead of dropping it as AHEAD."""
    net = tree
    rng = np.random.default_rng(4)
    for rnd, flags in ((0, 0), (1 << 24, Flag.START), ((1 << 24) + 2, 0)):
        got, want = full_round(net, rng, 3, rnd, flags=flags)
        for h in HOSTS:
            assert len(got[h]) == 1, f"{h}: {len(got[h])} results in round {rnd}"
            assert got[h][0].msg.header.round == rnd and got[h][0].msg.header.count == 4
            np.testing.assert_array_equal(got[h][0].msg.values, want)
