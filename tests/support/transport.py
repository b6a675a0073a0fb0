"""What the transport tests share: worker threads, aggregators on the embedded network, test
data and what to expect from it, the impairments every transport test runs and the dying-worker
scenario."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch

from control_plane.embedded import EmbeddedNetwork
from host.protocol import codec as wire
from host.protocol import layout as lay
from host.thc.codec import THCCodec
from host.thc.lanes import aggregate_packed
from host.thc.simulate import allreduce as simulated_allreduce
from host.thc.simulate import encode_workers, table_values
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


@contextlib.contextmanager
def in_background(fn: Callable[[threading.Event], None]) -> Iterator[None]:
    """Run ``fn(stop)`` on a daemon thread for the ``with`` block; after it, set ``stop`` and
    wait up to 5 s for the thread."""
    stop = threading.Event()
    th = threading.Thread(target=fn, args=(stop,), daemon=True)
    th.start()
    try:
        yield
    finally:
        stop.set()
        th.join(5)


def close_all(aggs: list) -> None:
    """Close every aggregator's endpoint."""
    for a in aggs:
        a.ep.close()


def run_and_close(aggs: list, fn, timeout: float = 60.0) -> list:
    """:func:`run_workers` with one thread per aggregator, then close every aggregator's
    endpoint, also when a worker failed."""
    try:
        return run_workers(len(aggs), fn, timeout)
    finally:
        close_all(aggs)


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
    spec = JobSpec(net.job_id, rank, net.workers, num_slots=net.num_slots, round_base=base, token=net.token)
    return NetworkAggregator(ep, spec, slots)


def far_starts(job_id: int, token: int, num_slots: int, rnd: int, rank: int = 0,
               coords: int = lay.COORDS_PER_PACKET) -> list[bytes]:
    """START contributions of ``rank`` with the job's ``token``, 2^30 rounds past ``rnd``, in
    every slot copy, data and norm, on a job of packet width ``coords``: the flood of issue 33
    (1) that stalled every rank of a job that obeyed it."""
    out = []
    for slot in range(num_slots):
        for k in (0, 1):
            far = rnd + (1 << 30) + k
            lo, hi = lay.round_fields(far)
            for norm in (False, True):
                h = wire.Header(msg_type=lay.MsgType.NORM if norm else lay.MsgType.DATA,
                                job_id=job_id, rank=rank, slot=slot, round=lo, round_hi=hi,
                                slot_set=far & 1, lane_bits=32 if norm else lay.INDEX_BITS,
                                flags=int(lay.Flag.START), token=token,
                                elem_count=lay.NORMS_PER_PACKET if norm else coords)
                pay = lay.NORMS.nbytes if norm else coords // 2
                out.append(wire.pack_header(h) + bytes(pay))
    return out


def worker_data(n: int, numel: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(numel, generator=g) * (1 + r) for r in range(n)]


def encode_all(codec, xs: list[torch.Tensor]) -> list:
    """Each worker's encoding of its tensor (round 0) with the agreed norms (the maxima)."""
    return encode_workers(codec, xs)


def packed_sums(codec, encs: list, n_coords: int | None = None) -> np.ndarray:
    """The exact integer sums a switch returns for ``encs``: table values added per coordinate."""
    cfg = codec.cfg
    return aggregate_packed([e.payload for e in encs], codec.table, cfg.granularity, cfg.bits,
                            encs[0].layout.padded if n_coords is None else n_coords)


def assert_exact_sums(got: list, n: int, want: np.ndarray) -> None:
    """Every worker's ``(sums, count)`` is all ``n`` contributions summed exactly to ``want``."""
    for sums, count in got:
        assert count == n
        np.testing.assert_array_equal(sums.numpy().astype(np.int64), want.astype(np.int64))


def assert_bit_identical(codec, xs: list[torch.Tensor], got: list[torch.Tensor]) -> None:
    """Every worker's all-reduce result equals the in-process protocol's to the bit."""
    ref = simulated_allreduce(codec, xs, round=0).average
    for g in got:
        assert torch.equal(g, ref)


#: Impairments every transport test runs (here, the C loop's and BMv2's tests).
FAULTS = [
    {"loss_pct": 5.0},
    {"dup_pct": 5.0},
    {"reorder_pct": 10.0, "reorder_ms": 3.0},
    {"loss_pct": 2.0, "dup_pct": 2.0, "reorder_pct": 5.0, "delay_ms": 1.0},
]
FAULT_IDS = ["loss5", "dup5", "reorder10", "mixed"]


def allreduce_under_faults(connect) -> tuple[list, list]:
    """4 workers all-reduce 60,000 coordinates each through a fresh software target, with the
    retransmission timers of a faulty path; ``connect(net, rank, slots)`` gives a rank's
    aggregator and the faulty part of its path (with ``stats`` and ``close()``). Every rank's
    result is bit-identical to the in-process protocol's. Returns (aggregators, faulty parts)."""
    n = 4
    codec = THCCodec()
    xs = worker_data(n, 60_000, 11)
    with EmbeddedNetwork(n, num_slots=16) as net:
        slots = SlotConfig(rto=0.01, max_rto=0.1)
        pairs = [connect(net, r, slots) for r in range(n)]
        aggs = [a for a, _ in pairs]
        try:
            got = run_workers(n, lambda r: aggs[r].allreduce(xs[r], codec))
        finally:
            for a, faulty in pairs:
                a.ep.close()
                faulty.close()
    assert_bit_identical(codec, xs, got)
    return aggs, [f for _, f in pairs]


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
    vals = table_values(codec, encs)
    for sums, count in got[: n - 1]:
        assert isinstance(count, torch.Tensor)  # per-coordinate counts: some packets partial
        c = count.numpy()
        assert set(np.unique(c)) == {n - 1, n}
        assert (c[: 20 * 256] == n).all()  # what the dead rank sent before dying was counted
        want = np.where(c == n, sum(vals), sum(vals[: n - 1]))
        np.testing.assert_array_equal(sums.numpy().astype(np.int64), want)
    return got


def assert_faults_in_effect(faults: dict, stats: list, aggs: list) -> None:
    """Each impairment in ``faults`` really happened (``stats``: the fault injectors' counters;
    a loss was also retransmitted by ``aggs``), so that a test passing under faults did not
    pass without them."""
    if faults.get("loss_pct"):
        assert sum(s.dropped for s in stats) > 0
        assert sum(a.window.stats.retransmits for a in aggs) > 0
    if faults.get("dup_pct"):
        assert sum(s.duplicated for s in stats) > 0
    if faults.get("reorder_pct") or faults.get("delay_ms"):
        assert sum(s.delayed for s in stats) > 0
