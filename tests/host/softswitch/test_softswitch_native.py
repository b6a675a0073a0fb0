"""The software target's C fast path (``host/softswitch/_fastpath.c``) against the reference.

The reference is the packet-by-packet slot logic of the numpy/Python pipeline (``fast`` and
``native`` off, one frame at a time). The C path must produce the same frames (bytes and order),
registers, sums, counters and outcomes; batches outside its case must fall back with nothing
changed (its undo log), which the mixed batches below exercise.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host.protocol.framing import PAYLOAD_OFFSET
from host.protocol.layout import Flag
from host.softswitch import pipeline as pl_mod
from host.softswitch.frames import ipv4_checksum
from host.softswitch.pipeline import ROW
from tests.support.softswitch import TABLE, Bench, C, Peer, data, worker

pytestmark = pytest.mark.skipif(pl_mod._fastpath is None,
                                reason="the C fast path (host/softswitch/_fastpath) is not built")

W = [worker(r) for r in range(4)]
INTRUDER = Peer(0, 9, "10.0.0.9", "02:00:00:00:00:09")


def _bench(lane_bits: int = 8, members: int = 3, parent: bool = False) -> Bench:
    x = Bench(pool_slots=8)
    kw = {"parent": (7, "10.9.9.9")} if parent else {}
    x.job(30, W[:3], num_slots=2, lane_bits=lane_bits, members=W[:members], **kw)
    return x


def _state(x: Bench) -> tuple:
    p = x.sw.pipeline
    return ({k: v.tolist() for k, v in p.state().items()}, p.sums.tobytes(), x.drops(),
            x.counter("contributions").tolist(), x.counter("results").tolist(),
            x.counter("resent").tolist(), dict(p.outcomes))


def _run(frames, native: bool, batch: bool, **bench) -> tuple:
    x = _bench(**bench)
    p = x.sw.pipeline
    p.native = native
    p.fast = native
    groups = [frames] if batch else [[f] for f in frames]
    out = [o for g in groups for o in x.sw.process_frames(g)]
    assert all(ipv4_checksum(f[14:34]) == 0 for _, f in out)
    return out, _state(x), p.native_batches


_packet = st.tuples(
    st.sampled_from([0, 1, 2, 2, 0, 1, 3]),              # worker 0..2, 3 = intruder
    st.integers(0, 1),                                   # slot
    st.sampled_from([0, 0, 1, 1, 2, 0xFFFFFFFF]),        # round (incl. wrap)
    st.sampled_from([0, 0, 0, int(Flag.RETX), int(Flag.DEADLINE), int(Flag.PEEK)]),
    st.integers(0, 15),                                  # fill
)


def _frames(spec):
    return [data(INTRUDER if w == 3 else W[w], 30, slot, rnd, np.full(C, fill), flags=flags)
            for w, slot, rnd, flags, fill in spec]


@settings(max_examples=80, deadline=None)
@given(st.lists(_packet, min_size=1, max_size=30), st.sampled_from([8, 16, 32]),
       st.sampled_from([3, 2]))
def test_c_path_matches_the_packet_by_packet_reference(spec, lane_bits, members):
    frames = _frames(spec)
    want, ref, _ = _run(frames, native=False, batch=False, lane_bits=lane_bits, members=members)
    got, state, _ = _run(frames, native=True, batch=True, lane_bits=lane_bits, members=members)
    assert sorted(got) == sorted(want)
    assert state == ref


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 3),
                          st.integers(0, 15)), min_size=1, max_size=60))
def test_plain_batches_run_in_c_and_equal_the_numpy_path(spec):
    """Plain contributions (the C path's domain and its fallbacks): same frames in the same
    order as the numpy fast path, same state as the reference."""
    frames = [data(W[w], 30, slot, rnd, np.full(C, fill)) for w, slot, rnd, fill in spec]
    _, ref, _ = _run(frames, native=False, batch=False)
    x = _bench()
    x.sw.pipeline.native = False
    numpy_out = x.sw.process_frames(frames)
    got, state, _ = _run(frames, native=True, batch=True)
    assert got == numpy_out
    assert state == ref


def test_a_plain_batch_is_handled_in_c():
    rng = np.random.default_rng(1)
    idx = [rng.integers(0, 16, C) for _ in range(3)]
    frames = [data(W[r], 30, s, 5, idx[r]) for s in range(2) for r in range(3)]
    got, state, nat = _run(frames, native=True, batch=True)
    want, ref, _ = _run(frames, native=False, batch=False)
    assert nat == 1 and got == sorted(got, key=lambda f: f[0]) and sorted(got) == sorted(want)
    assert state == ref and len(got) == 6
    t = np.asarray(TABLE)
    for _, f in got:
        assert np.array_equal(np.frombuffer(f[PAYLOAD_OFFSET:], dtype=np.uint8),
                              (sum(t[i] for i in idx)) & 0xFF)


def test_a_duplicate_mid_batch_rolls_back_and_falls_back():
    """Frames 0..3 change two copies in C, frame 4 is a counted contributor again: the batch
    goes to the Python path from the state before it (one DUPLICATE drop, no double count)."""
    frames = [data(W[0], 30, 0, 1, np.full(C, 3)), data(W[1], 30, 0, 1, np.full(C, 4)),
              data(W[0], 30, 1, 1, np.full(C, 5)), data(W[1], 30, 1, 1, np.full(C, 6)),
              data(W[0], 30, 0, 1, np.full(C, 3)), data(W[2], 30, 0, 1, np.full(C, 7))]
    got, state, nat = _run(frames, native=True, batch=True)
    want, ref, _ = _run(frames, native=False, batch=False)
    assert nat == 0
    assert sorted(got) == sorted(want) and state == ref
    assert sum(ref[2].values()) == 1


def test_a_job_with_a_parent_falls_back():
    frames = [data(W[r], 30, 0, 0, np.full(C, r + 1)) for r in range(3)]
    got, state, nat = _run(frames, native=True, batch=True, parent=True)
    want, ref, _ = _run(frames, native=False, batch=False, parent=True)
    assert nat == 0 and sorted(got) == sorted(want) and state == ref and len(got) == 1


def test_arrival_order_from_several_ports_is_kept():
    """Rows in port order, receive stamps in another: both paths follow the stamps."""
    frames = [data(W[r], 30, 0, rnd, np.full(C, r + rnd)) for rnd in (0, 2) for r in range(3)]
    stamps = np.array([1, 2, 0, 4, 5, 3], dtype=np.int64)   # not in row (port) order

    def run(native: bool):
        x = _bench()
        p = x.sw.pipeline
        p.native = native
        n = len(frames)
        buf = np.zeros((n, ROW), dtype=np.uint8)
        lens = np.zeros(n, dtype=np.int64)
        ports = np.zeros(n, dtype=np.int64)
        for i, (port, f) in enumerate(frames):
            buf[i, : len(f)] = np.frombuffer(f, dtype=np.uint8)
            lens[i], ports[i] = len(f), port
        out = p.process(buf, lens, ports, n, stamps).frames()
        return out, _state(x), p.native_batches

    a, sa, na = run(True)
    b, sb, nb = run(False)
    assert na == 1 and nb == 0
    assert a == b and sa == sb


def test_the_c_path_reports_the_rows_it_accepted():
    """Learning after a C batch is explicit: the C path says which rows it accepted (all of a
    batch it takes), and a batch it hands back gets the numpy path's own list."""
    x = _bench()
    p = x.sw.pipeline
    frames = [data(W[r], 30, s, 5, np.full(C, r)) for s in range(2) for r in range(3)]
    x.sw.process_frames(frames)
    assert p.native_batches == 1
    assert p.accepted.tolist() == list(range(len(frames)))
    # an intruder in the batch: not the C path's case; the numpy path accepts the others only
    mixed = [data(W[0], 30, 0, 7, np.full(C, 1)), data(INTRUDER, 30, 0, 7, np.full(C, 1)),
             data(W[1], 30, 0, 7, np.full(C, 1))]
    x.sw.process_frames(mixed)
    assert p.native_batches == 1
    assert p.accepted.tolist() == [0, 2]
    x.sw.process_frames([])
    assert p.accepted.tolist() == []


def test_process_writes_the_accepted_rows():
    """``_fastpath.process`` itself fills the accepted array (rows of the batch it took)."""
    x = _bench()
    p = x.sw.pipeline
    frames = [data(W[r], 30, 1, 3, np.full(C, r)) for r in range(3)]
    n = len(frames)
    buf = np.zeros((n, ROW), dtype=np.uint8)
    lens = np.zeros(n, dtype=np.int64)
    ports = np.zeros(n, dtype=np.int64)
    for i, (port, f) in enumerate(frames):
        buf[i, : len(f)] = np.frombuffer(f, dtype=np.uint8)
        lens[i], ports[i] = len(f), port
    from host.softswitch.controls.native import _NATIVE_CONSTS, native_job
    cfg = p.cfg
    job = native_job(cfg, int(cfg.job_map[30]))
    acc = np.full(n, -1, dtype=np.int64)
    out = p.out
    out.reserve(n * 3)
    res = pl_mod._fastpath.process(buf, lens, ports, n, None, job, p.native_state(cfg),
                                   _NATIVE_CONSTS, (out.buf, out.lens, out.ports), acc)
    assert res is not None and res[3] == n and acc.tolist() == [0, 1, 2]
    # a stale round (behind the copy's) is not taken: nothing accepted, nothing written
    acc[:] = -1
    stale = data(W[0], 30, 1, 1, np.full(C, 0))[1]
    buf[0, : len(stale)] = np.frombuffer(stale, dtype=np.uint8)
    res = pl_mod._fastpath.process(buf, lens, ports, 1, None, job, p.native_state(cfg),
                                   _NATIVE_CONSTS, (out.buf, out.lens, out.ports), acc)
    assert res is None and acc.tolist() == [-1, -1, -1]
