"""In-network THC all-reduce through the software target on loopback UDP (no root).

The switch is real (``python -m host.softswitch`` configured by the controller over P4Runtime);
workers are threads with their own loopback addresses. Sums must be bit-exact integer sums of
the workers' table values (THC step 9), also under injected loss, duplication, reordering and
delay; a dead worker gives a partial sum with m = n − 1 (partial policy) or a timeout error
naming it (exact policy).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from control_plane.embedded import EmbeddedNetwork
from host.thc import THCCodec
from host.thc.simulate import allreduce as simulated_allreduce
from host.transport.faults import FaultyEndpoint
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from host.transport.slots import SlotConfig, SlotTimeoutError
from tests.support.token import TOKEN
from tests.support.transport import (
    FAULT_IDS,
    FAULTS,
    aggregator,
    allreduce_under_faults,
    assert_bit_identical,
    assert_exact_sums,
    assert_faults_in_effect,
    encode_all,
    new_session,
    packed_sums,
    run_and_close,
    run_workers,
    sums_with_a_dying_worker,
    worker_data,
)


@pytest.fixture(scope="module", params=[2, 4, 8])
def net(request):
    with EmbeddedNetwork(request.param, num_slots=32) as n:
        yield n


@pytest.mark.parametrize("numel", [1, 255, 1000, 4097, 70_001])
def test_exact_integer_sums(net, numel):
    n = net.workers
    codec = THCCodec()
    xs = worker_data(n, numel, numel)
    encs = encode_all(codec, xs)
    want = packed_sums(codec, encs)
    base = new_session(net)
    aggs = [aggregator(net, r, base) for r in range(n)]
    got = run_and_close(aggs, lambda r: aggs[r].sum_encoded(encs[r], codec))
    assert_exact_sums(got, n, want)


def test_sums_into_a_reused_buffer_are_exact_every_time(net):
    """``sum_encoded(out=...)``: the lane sums land in the caller's buffer (the returned tensor
    is a view of it), exact in every one of repeated exchanges through the same buffer, and the
    buffer keeps nothing of an earlier exchange (the first has other data)."""
    n = net.workers
    codec = THCCodec()
    base = new_session(net)
    aggs = [aggregator(net, r, base) for r in range(n)]
    numel = 5000
    try:
        bufs = [np.full(aggs[r].sums_size(codec.layout(numel).padded), 0xEF, aggs[r].spec.sums_dtype)
                for r in range(n)]
        for seed in (3, 4):
            encs = encode_all(codec, worker_data(n, numel, seed))
            got = run_workers(n, lambda r, encs=encs: aggs[r].sum_encoded(encs[r], codec,
                                                                           out=bufs[r]))
            assert_exact_sums(got, n, packed_sums(codec, encs))
            for r in range(n):
                assert got[r][0].data_ptr() == bufs[r].ctypes.data
    finally:
        for a in aggs:
            a.ep.close()


@pytest.mark.parametrize("bad", ["dtype", "size", "strided"])
def test_a_sums_buffer_of_the_wrong_kind_is_refused_before_sending(bad):
    codec = THCCodec()
    enc = encode_all(codec, worker_data(1, 3000, 1))[0]
    agg = NetworkAggregator(UdpEndpoint(("127.0.0.1", 9), bind=("127.0.0.1", 0)),
                            JobSpec(1, 0, 2, num_slots=4, token=TOKEN))
    size = agg.sums_size(enc.layout.padded)
    dt = agg.spec.sums_dtype
    out = {"dtype": np.zeros(size, np.uint32), "size": np.zeros(size - 1, dt),
           "strided": np.zeros(2 * size, dt)[::2]}[bad]
    try:
        with pytest.raises(ValueError, match=f"out: a contiguous 1-D {dt} array"):
            agg.sum_encoded(enc, codec, out=out)
        assert agg.window.stats.packets == 0
    finally:
        agg.ep.close()


def test_allreduce_equals_the_in_process_protocol(net):
    n = net.workers
    codec = THCCodec()
    xs = worker_data(n, 20_000, 7)
    base = new_session(net)
    aggs = [aggregator(net, r, base) for r in range(n)]
    got = run_and_close(aggs, lambda r: aggs[r].allreduce(xs[r], codec))
    assert_bit_identical(codec, xs, got)  # same norms, keys and integer sums: bit-identical


@pytest.mark.parametrize("faults", [{"loss_pct": 1.0}, *FAULTS, {"delay_ms": 2.0}],
                         ids=["loss1", *FAULT_IDS, "delay2"])
def test_sums_stay_exact_under_faults(faults):
    def connect(net: EmbeddedNetwork, r: int, slots: SlotConfig):
        agg = aggregator(net, r, 1, slots, **faults)
        return agg, agg.ep   # the FaultyEndpoint

    t0 = time.monotonic()
    aggs, faulty = allreduce_under_faults(connect)
    assert_faults_in_effect(faults, [f.stats for f in faulty], aggs)
    print(f"faults {faults}: switch start and all-reduce in {time.monotonic() - t0:.2f} s")


def test_dead_worker_partial_policy_decodes_the_others():
    n = 4
    codec = THCCodec()
    xs = worker_data(n, 10_000, 3)
    with EmbeddedNetwork(n, num_slots=16) as net:
        # once rank 3 is known absent, ask for sums 0.1 s after sending (not ~1 RTO): on a
        # loaded machine a live worker could otherwise miss a packet's sum (m = 2, unbiased,
        # but not the bit-identical result this test compares with)
        slots = SlotConfig(policy="partial", deadline=0.3, rto=0.02, max_rto=0.1,
                           suspect_wait=0.1)
        aggs = [aggregator(net, r, 1, slots) for r in range(n - 1)]  # rank 3 never shows up
        # Norm agreement needs all workers too: the partial policy releases it at the deadline.
        try:
            got = run_workers(n - 1, lambda r: aggs[r].allreduce(xs[r], codec))
        finally:
            for a in aggs:
                a.ep.close()
    ref = simulated_allreduce(codec, [*xs[:n - 1], torch.zeros_like(xs[0])], round=0,
                              contributors=[0, 1, 2])
    # issue 16, H4: once rank 3 is suspected, the lowest live rank asks for the sums and the
    # others only back it up, so some live ranks may never need to ask
    assert sum(a.window.stats.deadlines for a in aggs) > 0
    for a, g in zip(aggs, got, strict=True):
        assert a.last_count == n - 1
        assert a.window.stats.missing_ranks == {3}
        # The zero tensor of rank 3 does not change the norms' maximum, so this is the
        # in-process protocol with contributors 0..2: bit-identical.
        assert torch.equal(g, ref.average)


def test_dead_worker_exact_policy_names_it():
    n = 3
    codec = THCCodec()
    xs = worker_data(n, 5_000, 5)
    with EmbeddedNetwork(n, num_slots=8) as net:
        slots = SlotConfig(policy="exact", give_up=1.0, rto=0.05, max_rto=0.2)
        aggs = [aggregator(net, r, 1, slots) for r in range(n - 1)]  # rank 2 is dead
        try:
            with pytest.raises(SlotTimeoutError, match=r"missing ranks \[2\]") as exc:
                run_workers(n - 1, lambda r: aggs[r].allreduce(xs[r], codec))
        finally:
            for a in aggs:
                a.ep.close()
    assert exc.value.missing == [2]


def test_job_spec_is_checked():
    with pytest.raises(ValueError, match="rank"):
        JobSpec(job_id=1, rank=4, world=4, token=TOKEN)
    with pytest.raises(ValueError, match="policy"):
        SlotConfig(policy="maybe")
    # issue 33 (7): a token of 0 (the default of a header nobody filled in) is never a job's
    with pytest.raises(ValueError, match="token=0: give the job's token"):
        JobSpec(job_id=1, rank=0, world=4)


def test_a_new_session_needs_newer_rounds(net):
    """Reusing rounds of a finished session gets the stored results back, not new sums."""
    n = net.workers
    codec = THCCodec()
    base = new_session(net)
    for seed in (1, 2):
        xs = worker_data(n, 300, seed)
        encs = encode_all(codec, xs)
        want = packed_sums(codec, encs, 512)
        aggs = [aggregator(net, r, base) for r in range(n)]
        try:
            got = run_workers(n, lambda r: aggs[r].sum_encoded(encs[r], codec))  # noqa: B023
        finally:
            for a in aggs:
                a.ep.close()
        same = np.array_equal(got[0][0].numpy().astype(np.int64), want.astype(np.int64))
        assert same == (seed == 1)  # the second session reused the first one's rounds


def test_worker_killed_mid_round_partial_sums_are_exact_per_packet():
    """Rank 3 sends its first 20 DATA packets, then dies: later packets hold m = 3."""
    n, numel = 4, 64 * 256  # 64 packets, window 8
    codec = THCCodec()
    xs = worker_data(n, numel, 9)
    encs = encode_all(codec, xs)
    with EmbeddedNetwork(n, num_slots=8) as net:
        # counts must be n or n - 1 only: a generous wait once the dead rank is known
        slots = SlotConfig(policy="partial", deadline=0.3, rto=0.02, max_rto=0.1, suspect_wait=0.1)
        aggs = [aggregator(net, r, 1, slots) for r in range(n - 1)]
        a = net.address(n - 1)
        dying = NetworkAggregator(
            FaultyEndpoint(UdpEndpoint(a.switch, bind=(a.ip, 0)), die_after=20),
            JobSpec(net.job_id, n - 1, n, num_slots=8, token=net.token), SlotConfig(give_up=1.0, rto=0.02))

        try:
            sums_with_a_dying_worker(n, aggs, dying, encs, codec)
        finally:
            for ag in [*aggs, dying]:
                ag.ep.close()
