"""In-network THC all-reduce through the software target on loopback UDP (no root).

The switch is real (``python -m host.softswitch`` configured by the controller over P4Runtime);
workers are threads with their own loopback addresses. Sums must be bit-exact integer sums of
the workers' table values (THC step 9), also under injected loss, duplication, reordering and
delay; a dead worker gives a partial sum with m = n − 1 (partial policy) or a timeout error
naming it (exact policy).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from control_plane.embedded import EmbeddedNetwork
from host.thc import THCCodec
from host.thc.lanes import aggregate_packed
from host.thc.simulate import allreduce as simulated_allreduce
from host.transport.faults import FaultyEndpoint
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from host.transport.slots import SlotConfig, SlotTimeoutError


def run_workers(n: int, fn, timeout: float = 60.0) -> list:
    """Run ``fn(rank)`` in ``n`` threads; return results, re-raise the first error."""
    out: list = [None] * n
    errs: list = [None] * n

    def go(r: int) -> None:
        try:
            out[r] = fn(r)
        except BaseException as exc:
            errs[r] = exc

    ts = [threading.Thread(target=go, args=(r,), daemon=True) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    assert not any(t.is_alive() for t in ts), "a worker hung"
    for e in errs:
        if e is not None:
            raise e
    return out


_BASE = {"next": 1}


def new_session(net: EmbeddedNetwork) -> int:
    """A round base above every round the previous session on ``net`` used."""
    _BASE["next"] += 1 << 20
    return _BASE["next"]


def aggregator(net: EmbeddedNetwork, rank: int, base: int, slots: SlotConfig | None = None,
               **faults) -> NetworkAggregator:
    a = net.address(rank)
    ep = UdpEndpoint(a.switch, bind=(a.ip, 0))
    if faults:
        ep = FaultyEndpoint(ep, seed=rank, **faults)
    spec = JobSpec(net.job_id, rank, net.workers, num_slots=net.num_slots, round_base=base)
    return NetworkAggregator(ep, spec, slots)


@pytest.fixture(scope="module", params=[2, 4, 8])
def net(request):
    with EmbeddedNetwork(request.param, num_slots=32) as n:
        yield n


def worker_data(n: int, numel: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(numel, generator=g) * (1 + r) for r in range(n)]


#: Impairments every transport test runs (here, the C loop's and BMv2's tests).
FAULTS = [
    {"loss_pct": 5.0},
    {"dup_pct": 5.0},
    {"reorder_pct": 10.0, "reorder_ms": 3.0},
    {"loss_pct": 2.0, "dup_pct": 2.0, "reorder_pct": 5.0, "delay_ms": 1.0},
]
FAULT_IDS = ["loss5", "dup5", "reorder10", "mixed"]


def sums_with_a_dying_worker(n: int, aggs: list, dying, encs: list, codec) -> list:
    """Ranks 0..n-2 sum ``encs`` while rank n-1 (``dying``, which goes silent after 20 DATA
    packets) fails with SlotTimeoutError; checks the live ranks' partial sums packet by
    packet (m = n on what the dead rank sent, m = n - 1 after) and returns their results."""

    def work(r: int):
        if r == n - 1:
            with pytest.raises(SlotTimeoutError):
                dying.sum_encoded(encs[r], codec)
            return None
        return aggs[r].sum_encoded(encs[r], codec)

    got = run_workers(n, work)
    table = torch.tensor(codec.table)
    vals = [table[codec.indices(e).long()].numpy().astype(np.int64) for e in encs]
    for sums, count in got[: n - 1]:
        assert isinstance(count, torch.Tensor)  # per-coordinate counts: some packets partial
        c = count.numpy()
        assert set(np.unique(c)) == {n - 1, n}
        assert (c[: 20 * 256] == n).all()  # what the dead rank sent before dying was counted
        want = np.where(c == n, sum(vals), sum(vals[: n - 1]))
        np.testing.assert_array_equal(sums.numpy().astype(np.int64), want)
    return got


@pytest.mark.parametrize("numel", [1, 255, 1000, 4097, 70_001])
def test_exact_integer_sums(net, numel):
    n = net.workers
    codec = THCCodec()
    xs = worker_data(n, numel, numel)
    norms = torch.stack([codec.chunk_norms(x) for x in xs]).amax(0)
    encs = [codec.encode(x, norms, worker=r, round=0) for r, x in enumerate(xs)]
    want = aggregate_packed([e.payload for e in encs], codec.table, 30, 4, encs[0].layout.padded)
    base = new_session(net)
    aggs = [aggregator(net, r, base) for r in range(n)]
    try:
        got = run_workers(n, lambda r: aggs[r].sum_encoded(encs[r], codec))
    finally:
        for a in aggs:
            a.ep.close()
    for sums, count in got:
        assert count == n
        np.testing.assert_array_equal(sums.numpy().astype(np.int64), want.astype(np.int64))


def test_allreduce_equals_the_in_process_protocol(net):
    n = net.workers
    codec = THCCodec()
    xs = worker_data(n, 20_000, 7)
    base = new_session(net)
    aggs = [aggregator(net, r, base) for r in range(n)]
    try:
        got = run_workers(n, lambda r: aggs[r].allreduce(xs[r], codec))
    finally:
        for a in aggs:
            a.ep.close()
    ref = simulated_allreduce(codec, xs, round=0).average
    for g in got:
        assert torch.equal(g, ref)  # same norms, keys and integer sums: bit-identical


@pytest.mark.parametrize("faults", [{"loss_pct": 1.0}, *FAULTS, {"delay_ms": 2.0}],
                         ids=["loss1", *FAULT_IDS, "delay2"])
def test_sums_stay_exact_under_faults(faults):
    n = 4
    codec = THCCodec()
    xs = worker_data(n, 60_000, 11)
    with EmbeddedNetwork(n, num_slots=16) as net:
        slots = SlotConfig(rto=0.01, max_rto=0.1)
        aggs = [aggregator(net, r, 1, slots, **faults) for r in range(n)]
        t0 = time.monotonic()
        try:
            got = run_workers(n, lambda r: aggs[r].allreduce(xs[r], codec))
        finally:
            for a in aggs:
                a.ep.close()
        elapsed = time.monotonic() - t0
    ref = simulated_allreduce(codec, xs, round=0).average
    for g in got:
        assert torch.equal(g, ref)
    st = [a.ep.stats for a in aggs]
    if faults.get("loss_pct"):
        assert sum(s.dropped for s in st) > 0  # the fault was really in effect
        assert sum(a.window.stats.retransmits for a in aggs) > 0
    if faults.get("dup_pct"):
        assert sum(s.duplicated for s in st) > 0
    if faults.get("reorder_pct") or faults.get("delay_ms"):
        assert sum(s.delayed for s in st) > 0
    print(f"faults {faults}: completed in {elapsed:.2f} s")


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
    for a, g in zip(aggs, got, strict=True):
        assert a.last_count == n - 1
        assert a.window.stats.missing_ranks == {3}
        assert a.window.stats.deadlines > 0
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
        JobSpec(job_id=1, rank=4, world=4)
    with pytest.raises(ValueError, match="policy"):
        SlotConfig(policy="maybe")


def test_a_new_session_needs_newer_rounds(net):
    """Reusing rounds of a finished session gets the stored results back, not new sums."""
    n = net.workers
    codec = THCCodec()
    base = new_session(net)
    for seed in (1, 2):
        xs = worker_data(n, 300, seed)
        norms = torch.stack([codec.chunk_norms(x) for x in xs]).amax(0)
        encs = [codec.encode(x, norms, worker=r, round=0) for r, x in enumerate(xs)]
        want = aggregate_packed([e.payload for e in encs], codec.table, 30, 4, 512)
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
    norms = torch.stack([codec.chunk_norms(x) for x in xs]).amax(0)
    encs = [codec.encode(x, norms, worker=r, round=0) for r, x in enumerate(xs)]
    with EmbeddedNetwork(n, num_slots=8) as net:
        # counts must be n or n - 1 only: a generous wait once the dead rank is known
        slots = SlotConfig(policy="partial", deadline=0.3, rto=0.02, max_rto=0.1, suspect_wait=0.1)
        aggs = [aggregator(net, r, 1, slots) for r in range(n - 1)]
        a = net.address(n - 1)
        dying = NetworkAggregator(
            FaultyEndpoint(UdpEndpoint(a.switch, bind=(a.ip, 0)), die_after=20),
            JobSpec(net.job_id, n - 1, n, num_slots=8), SlotConfig(give_up=1.0, rto=0.02))

        try:
            sums_with_a_dying_worker(n, aggs, dying, encs, codec)
        finally:
            for ag in [*aggs, dying]:
                ag.ep.close()
