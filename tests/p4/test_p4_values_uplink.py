"""The values uplink on every target of tests/p4: DATA with 8-bit table values.

The v1model program parses DATA with ``lane_bits = 8`` as the values L[q] and adds them like
lanes (docs/protocol.md, "Values uplink"); sums must equal the indices uplink's, for 8- and
16-bit result lanes, and the job needs no THC table for it.
"""

from __future__ import annotations

import numpy as np
import pytest

from host.protocol import codec
from host.protocol import layout as lay
from host.protocol.layout import MsgType
from tests.support.aggnet import WORKERS
from tests.support.frames import collect, thc_frame
from tests.support.jobs import TABLE, new_job
from tests.support.token import TOKEN

C = lay.COORDS_PER_PACKET


def values_frame(net, job, host, rank, slot, rnd, values):
    h = codec.Header(token=TOKEN, msg_type=MsgType.DATA, lane_bits=lay.VALUE_BITS, job_id=job.job_id,
                     slot=slot, round=rnd, rank=rank)
    return thc_frame(net.hosts[host], job.self_ip, h, values)


@pytest.mark.parametrize(("n", "lane"), [(4, 8), (3, 16)])
def test_values_uplink_sums_like_indices(single_switch, n, lane):
    net = single_switch
    hosts = WORKERS[:n]
    job = new_job(net, hosts, lane_bits=lane)
    t = np.asarray(TABLE)
    rng = np.random.default_rng(lane)
    for rnd in range(2):
        idxs = [rng.integers(0, 16, C) for _ in hosts]
        for rank, h in enumerate(hosts):
            net.send(h, values_frame(net, job, h, rank, slot=0, rnd=rnd, values=t[idxs[rank]]))
        got = collect(net, hosts)
        want = np.sum([t[i] for i in idxs], axis=0)
        for h in hosts:
            assert len(got[h]) == 1, f"round {rnd}: {h} got {len(got[h])} results"
            m = got[h][0].msg
            assert m.msg_type is MsgType.RESULT and m.header.lane_bits == lane
            assert m.header.count == n
            np.testing.assert_array_equal(m.values, want)


def test_values_above_g_are_dropped_not_summed(single_switch):
    """Issue 33 (5): a values-uplink DATA of 255 per lane on a job with g = 15 made the sum
    (honest + 255) mod 256 with every lane still <= n·g; the software target drops it
    (``MALFORMED``), and so does the v1model program on BMv2 (its ``ThcLoad``), and the round
    completes with the honest contributions."""
    net = single_switch
    hosts = WORKERS[:2]
    job = new_job(net, hosts, lane_bits=8)
    t = np.asarray(TABLE)
    before = net.drop_counts("s0").get(int(lay.DropReason.MALFORMED), 0)
    forged = np.full(C, 255)
    net.send(hosts[0], values_frame(net, job, hosts[0], 0, slot=0, rnd=0, values=forged))
    idxs = [np.arange(C) % 16, (np.arange(C) * 7) % 16]
    for rank, h in enumerate(hosts):
        net.send(h, values_frame(net, job, h, rank, slot=0, rnd=0, values=t[idxs[rank]]))
    got = collect(net, hosts)
    for h in hosts:
        assert len(got[h]) == 1
        np.testing.assert_array_equal(got[h][0].msg.values, t[idxs[0]] + t[idxs[1]])
    assert net.drop_counts("s0").get(int(lay.DropReason.MALFORMED), 0) == before + 1
