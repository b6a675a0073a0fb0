"""The pipelined all-reduce (``NetworkAggregator.pipeline_coords``): parts encoded, exchanged
on a network thread and decoded overlapped give bit-identical results to the one-shot path,
with and without error feedback, C and Python slot loops, under injected faults; and the
codec's part-by-part encode/decode (``encode_into``/``decode_into`` over ``split_layout``
parts) writes the same bytes and values as the whole-tensor calls. No root."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from control_plane.embedded import EmbeddedNetwork
from host.protocol.layout import COORDS_PER_PACKET
from host.thc import THCCodec
from host.thc import fused as fused_mod
from host.thc.config import THCConfig
from host.thc.feedback import ErrorFeedback
from host.thc.layout import split_layout
from host.transport.faults import FaultyEndpoint
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from tests.support.token import TOKEN
from tests.support.transport import run_workers, worker_data

BACKENDS = ["torch", *(["fused"] if fused_mod.available() else [])]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("numel", [70_001, 64 * 1024, 5 * 1024 + 3])
def test_parts_encode_and_decode_like_the_whole(backend, numel):
    codec = THCCodec(backend=backend)
    x = torch.randn(numel, generator=torch.Generator().manual_seed(numel))
    norms = codec.chunk_norms(x) * 1.1
    whole = codec.encode(x, norms, worker=1, round=3, stream=2, residual=True)
    lay = codec.layout(numel)
    parts = split_layout(lay, 2048, COORDS_PER_PACKET)
    assert len(parts) > 1
    covered = [(s.first, s.count) for p in parts for s in p]
    assert sum(c for _, c in covered) == lay.n_chunks
    for p in parts:   # every part starts on a packet boundary
        assert p[0].offset % COORDS_PER_PACKET == 0
    payload = torch.zeros_like(whole.payload)
    res = torch.empty(numel)
    for p in reversed(parts):   # any order: every byte depends on its position only
        codec.encode_into(x, norms, p, payload, worker=1, round=3, stream=2, residual=res)
    assert torch.equal(payload, whole.payload)
    assert torch.equal(res, whole.residual)
    sums = codec.values(whole).to(torch.int64) * 3
    want = codec.decode(sums, 3, norms, numel, round=3, stream=2)
    out = torch.empty(numel)
    for p in parts:
        codec.decode_into(sums, 3, norms, p, out, round=3, stream=2)
    assert torch.equal(out, want)


_SESSION = {"next": 1}


def _base() -> int:
    """A round base above every round an earlier session on the module's switches used."""
    _SESSION["next"] += 1 << 20
    return _SESSION["next"]


def _aggregators(net, pipeline, native=True, **faults) -> list[NetworkAggregator]:
    """One aggregator per worker of ``net``'s job, a fresh session (round base)."""
    base = _base()
    aggs = []
    for r in range(net.workers):
        a = net.address(r)
        ep = UdpEndpoint(a.switch, bind=(a.ip, 0))
        if faults:
            ep = FaultyEndpoint(ep, seed=r, **faults)
        agg = NetworkAggregator(ep, JobSpec(net.job_id, r, net.workers, num_slots=net.num_slots,
                                            round_base=base, token=net.token,
                                            coords_per_packet=net.coords_per_packet),
                                pipeline_coords=pipeline)
        agg.window.native = native
        aggs.append(agg)
    return aggs


def _allreduce_all(net, xs, pipeline, native=True, feedback=False, rounds=1, **faults):
    n = net.workers
    codec = THCCodec()
    aggs = _aggregators(net, pipeline, native, **faults)
    fbs = [ErrorFeedback() if feedback else None for _ in range(n)]

    def work(r: int) -> list[torch.Tensor]:
        return [aggs[r].allreduce(xs[r] * (k + 1), codec, feedback=fbs[r]) for k in range(rounds)]

    try:
        got = run_workers(n, work, timeout=120)
    finally:
        for a in aggs:
            a.ep.close()
    parts = [a.last_timing["parts"] for a in aggs]
    return got, parts


@pytest.fixture(scope="module")
def net2():
    with EmbeddedNetwork(2, num_slots=32) as n:
        yield n


@pytest.fixture(scope="module")
def net2wide():
    with EmbeddedNetwork(2, num_slots=32, coords_per_packet=1024) as n:
        yield n


@pytest.fixture(scope="module")
def net4():
    with EmbeddedNetwork(4, num_slots=32) as n:
        yield n


@pytest.mark.parametrize("native", [True, False], ids=["c-loop", "python-loop"])
@pytest.mark.parametrize("feedback", [False, True], ids=["plain", "feedback"])
def test_pipelined_allreduce_is_bit_identical_to_one_shot(net2, native, feedback):
    xs = worker_data(2, 70_001, 11)
    one, p1 = _allreduce_all(net2, xs, 0, native, feedback, rounds=2)
    piped, p2 = _allreduce_all(net2, xs, 8192, native, feedback, rounds=2)
    assert p1 == [1, 1] and min(p2) > 2
    for a, b in zip(one, piped, strict=True):
        for ta, tb in zip(a, b, strict=True):
            assert torch.equal(ta, tb)
    # and every worker holds the same average
    for k in range(2):
        assert torch.equal(piped[0][k], piped[1][k])


@pytest.mark.parametrize("faults", [{"loss_pct": 3.0}, {"dup_pct": 5.0, "reorder_pct": 5.0,
                                                        "reorder_ms": 2.0}],
                         ids=["loss3", "dup-reorder"])
def test_pipelined_allreduce_exact_under_faults(net4, faults):
    xs = worker_data(4, 40_000, 12)
    one, _ = _allreduce_all(net4, xs, 0)
    piped, parts = _allreduce_all(net4, xs, 4096, **faults)
    assert min(parts) > 2
    for a, b in zip(one, piped, strict=True):
        assert torch.equal(a[0], b[0])
    assert np.isfinite(piped[0][0].numpy()).all()


@pytest.mark.parametrize("native", [True, False], ids=["c-loop", "python-loop"])
def test_wide_packets_give_the_same_averages(net2, net2wide, native):
    """1024 coordinates per packet (docs/protocol.md, "Packet width") change how many packets
    carry a tensor, not what is summed: bit-identical to 256, pipelined or not, with a short
    last packet (70,001 elements) and the wire buffers reused across sizes and calls."""
    xs = worker_data(2, 70_001, 13)
    ys = worker_data(2, 5 * 1024 + 3, 14)
    want, _ = _allreduce_all(net2, xs, 0, native, rounds=2)
    got, parts = _allreduce_all(net2wide, xs, 16384, native, rounds=2)
    assert min(parts) > 2
    for a, b in zip(want, got, strict=True):
        for ta, tb in zip(a, b, strict=True):
            assert torch.equal(ta, tb)
    small_want, _ = _allreduce_all(net2, ys, 0, native)
    small_got, _ = _allreduce_all(net2wide, ys, 0, native)
    assert torch.equal(small_want[0][0], small_got[0][0])


def test_one_aggregator_reuses_its_buffers_across_sizes(net2wide):
    """The same aggregators, sizes A, B, A, B, pipelined (reduce_into's reused wire buffers) give
    what the one-shot path (fresh buffers every call) gives for the same calls: counts
    refilled, the payload's padding still zero, nothing carried over."""
    n = 2
    codec = THCCodec()
    sizes = [20_001, 40_000, 20_001, 40_000]   # both pipelined (> 2 parts of 8192)
    data = [worker_data(n, m, 20 + k) for k, m in enumerate(sizes)]

    def calls(pipeline: int) -> list:
        aggs = _aggregators(net2wide, pipeline)
        try:
            return run_workers(n, lambda r: [aggs[r].allreduce(d[r], codec) for d in data],
                               timeout=120)
        finally:
            for a in aggs:
                a.ep.close()

    piped, one = calls(8192), calls(0)
    for r in range(n):
        for a, b in zip(piped[r], one[r], strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("pipeline", [0, 8192], ids=["one-shot", "pipelined"])
def test_an_in_place_allreduce_gives_the_same_average(net2wide, pipeline):
    """``allreduce(t, codec, out=t)`` (as ``torch.distributed.all_reduce``, in place) returns
    ``t`` holding what the allocating call returns; a wrong ``out`` is refused."""
    n = 2
    codec = THCCodec()
    xs = worker_data(n, 40_000, 31)
    want, _ = _allreduce_all(net2wide, xs, pipeline)
    aggs = _aggregators(net2wide, pipeline)
    ts = [x.clone() for x in xs]
    try:
        with pytest.raises(ValueError, match="out: a contiguous CPU float32 tensor"):
            aggs[0].allreduce(ts[0], codec, out=torch.empty(10))
        got = run_workers(n, lambda r: aggs[r].allreduce(ts[r], codec, out=ts[r]), timeout=120)
    finally:
        for a in aggs:
            a.ep.close()
    for r in range(n):
        assert got[r] is ts[r]
        assert torch.equal(ts[r], want[r][0])


def test_a_worker_of_another_width_is_dropped_and_fails_instead_of_summing(net2):
    """A worker set up for 1024 coordinates against a 256-coordinate switch: its packets are
    dropped as MALFORMED (counted) and the exchange gives up; nothing is summed."""
    from host.protocol.layout import DropReason
    from host.transport.slots import SlotConfig, SlotTimeoutError

    before = int(net2.status()[0].counters["ingress.drops"][DropReason.MALFORMED])
    a = net2.address(0)
    agg = NetworkAggregator(UdpEndpoint(a.switch, bind=(a.ip, 0)),
                            JobSpec(net2.job_id, 0, 2, num_slots=32, round_base=_base(),
                                    token=net2.token, coords_per_packet=1024),
                            SlotConfig(give_up=1.0), pipeline_coords=0)
    try:
        codec = THCCodec()
        x = torch.ones(4096)
        enc = codec.encode(x, codec.chunk_norms(x), worker=0, round=0)
        with pytest.raises(SlotTimeoutError):
            agg.sum_encoded(enc, codec)
    finally:
        agg.ep.close()
    after = int(net2.status()[0].counters["ingress.drops"][DropReason.MALFORMED])
    assert after >= before + 1


def test_a_job_spec_refuses_a_width_its_lanes_cannot_use():
    with pytest.raises(ValueError, match="coords_per_packet=300: use one of 256, 512, 1024"):
        JobSpec(1, 0, 2, coords_per_packet=300, token=TOKEN)
    # 9 workers at g = 30 need 16-bit lanes: 1024 of them do not fit a payload
    with pytest.raises(ValueError, match="coords_per_packet=1024 coordinates of 16-bit lanes"):
        JobSpec(1, 0, 9, coords_per_packet=1024, token=TOKEN)
    assert JobSpec(1, 0, 9, coords_per_packet=512, token=TOKEN).coords_per_packet == 512


def test_reduce_into_refuses_a_codec_the_job_was_not_set_up_for():
    # the job at the switch sums g = 30 table values; a g = 63 encoding would decode to garbage
    ep = UdpEndpoint(("127.0.0.1", 9), bind=("127.0.0.1", 0))
    try:
        agg = NetworkAggregator(ep, JobSpec(1, 0, 2, granularity=30, token=TOKEN))
        x = torch.ones(4096)
        codec = THCCodec(THCConfig(granularity=63))
        with pytest.raises(ValueError, match="g=63 but the job was set up for g=30"):
            agg.reduce_into(x, codec, codec.chunk_norms(x), torch.empty(4096), round=0)
        assert agg.window.stats.packets == 0        # refused before anything was sent
    finally:
        agg.close(finish=False)    # no switch at port 9: a closing exchange would wait give_up
