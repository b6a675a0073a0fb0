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

from host.protocol import layout as lay
from host.protocol.framing import PAYLOAD_OFFSET
from host.protocol.layout import ROUND_MASK, Flag, MsgType
from host.softswitch import pipeline as pl_mod
from host.softswitch.config import PRESENCE_HEARD
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
            x.counter("resent").tolist(), dict(p.outcomes),
            p.cfg.presence[:, :PRESENCE_HEARD].tolist(),   # (the clock column differs)
            x.counter("rank_contributions").tolist())


def _process(x: Bench, frames, native: bool, batch: bool) -> tuple:
    """Outputs, end state and native batches of ``x``'s switch after ``frames`` (one batch, or
    one frame at a time), through the C fast path or the numpy reference."""
    p = x.sw.pipeline
    p.native = native
    p.fast = native
    groups = [frames] if batch else [[f] for f in frames]
    out = [o for g in groups for o in x.sw.process_frames(g)]
    assert all(ipv4_checksum(f[14:34]) == 0 for _, f in out)
    return out, _state(x), p.native_batches


def _run(frames, native: bool, batch: bool, **bench) -> tuple:
    return _process(_bench(**bench), frames, native, batch)


_packet = st.tuples(
    st.sampled_from([0, 1, 2, 2, 0, 1, 3]),              # worker 0..2, 3 = intruder
    st.integers(0, 1),                                   # slot
    st.sampled_from([0, 0, 1, 1, 2, 4, ROUND_MASK]),     # round (incl. wrap, a lap)
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


def _bound_bench() -> Bench:
    """Job 30 whose workers' bindings name UDP ports 5000 + rank, and worker 2's none (0)."""
    x = Bench(pool_slots=8)
    bound = [Peer(w.rank, w.port, w.ip, w.mac, udp_port=5000 + w.rank if w.rank < 2 else 0)
             for w in W[:3]]
    x.job(30, bound, num_slots=2, lane_bits=8, members=W[:3])
    return x


@pytest.mark.parametrize("native", [True, False])
def test_a_binding_with_a_udp_port_drops_the_members_other_ports(native):
    """issue 33: a datagram of a member's address, rank and token from another UDP port than
    its binding names is BAD_SENDER (touching nothing), in C and in the reference alike; a
    binding without a port (0) takes any."""
    rng = np.random.default_rng(2)
    idx = [rng.integers(0, 16, C) for _ in range(3)]
    frames = [data(W[0], 30, 0, 5, np.full(C, 15), sport=5001),   # rank 0 from rank 1's port
              data(W[1], 30, 0, 5, np.full(C, 15), sport=40000),  # rank 1 from elsewhere
              data(W[0], 30, 0, 5, idx[0], sport=5000),
              data(W[1], 30, 0, 5, idx[1], sport=5001),
              data(W[2], 30, 0, 5, idx[2], sport=47123)]          # unbound: any port
    got, state, nat = _process(_bound_bench(), frames, native, batch=True)
    want, ref, _ = _process(_bound_bench(), frames, False, batch=False)
    assert sorted(got) == sorted(want) and state == ref
    assert ref[2] == {int(lay.DropReason.BAD_SENDER): 2}
    assert len(got) == 3
    t = np.asarray(TABLE)
    for _, f in got:
        assert np.array_equal(np.frombuffer(f[PAYLOAD_OFFSET:], dtype=np.uint8),
                              (sum(t[i] for i in idx)) & 0xFF)
    good = [data(W[r], 30, 1, 5, idx[r], sport=(5000 + r) if r < 2 else 9) for r in range(3)]
    _, _, nat = _process(_bound_bench(), good, native, batch=True)
    assert nat == (1 if native else 0)      # bound ports on their ports: the C path takes it


def test_a_duplicate_mid_batch_is_dropped_and_counted_in_c():
    """Frames 0..3 change two copies in C, frame 4 is a counted contributor again: the C path
    drops it as the reference does (one DUPLICATE drop, no double count), the rest goes on."""
    frames = [data(W[0], 30, 0, 1, np.full(C, 3)), data(W[1], 30, 0, 1, np.full(C, 4)),
              data(W[0], 30, 1, 1, np.full(C, 5)), data(W[1], 30, 1, 1, np.full(C, 6)),
              data(W[0], 30, 0, 1, np.full(C, 3)), data(W[2], 30, 0, 1, np.full(C, 7))]
    got, state, nat = _run(frames, native=True, batch=True)
    want, ref, _ = _run(frames, native=False, batch=False)
    assert nat == 1
    assert sorted(got) == sorted(want) and state == ref
    assert ref[2] == {int(lay.DropReason.DUPLICATE): 1}


def test_a_lapping_member_is_dropped_in_c_as_in_the_reference():
    """Issue 33 (1): rounds a member sends past what its copy may take next are AHEAD drops in
    the C path, without a rollback, as in the packet-by-packet reference: round 4 while round
    0 collects, round 6 once round 0 is released, and round 4 while round 2 collects (the
    issue's case: the next round, but the copy has not released round 2 and was opened from
    a released copy, not from empty). The others' rounds 0, 2 and 4 complete. A copy opened
    from empty (copy 1 here: a new job, or a restart whose repairs reopen copies at rounds
    nobody waits for) still takes its next round while it collects."""
    frames = [data(W[0], 30, 0, 0, np.full(C, 3)), data(W[1], 30, 0, 4, np.full(C, 15)),
              data(W[1], 30, 0, 0, np.full(C, 4)), data(W[2], 30, 0, 0, np.full(C, 5)),
              data(W[2], 30, 0, 6, np.full(C, 15)),
              data(W[0], 30, 0, 2, np.full(C, 6)), data(W[1], 30, 0, 4, np.full(C, 15)),
              data(W[1], 30, 0, 2, np.full(C, 7)), data(W[2], 30, 0, 2, np.full(C, 8)),
              data(W[0], 30, 0, 1, np.full(C, 1)), data(W[1], 30, 0, 3, np.full(C, 2)),
              data(W[0], 30, 0, 3, np.full(C, 9)), data(W[2], 30, 0, 3, np.full(C, 10))]
    got, state, nat = _run(frames, native=True, batch=True)
    want, ref, _ = _run(frames, native=False, batch=False)
    assert nat == 1
    assert ref[2] == {int(lay.DropReason.AHEAD): 3}
    assert sorted(got) == sorted(want) and state == ref
    sums = sorted({bytes(f[PAYLOAD_OFFSET:]) for _, f in want})
    t = np.asarray(TABLE)
    assert sums == sorted({bytes([(t[3] + t[4] + t[5]) & 0xFF] * C),
                           bytes([(t[6] + t[7] + t[8]) & 0xFF] * C),
                           bytes([(t[2] + t[9] + t[10]) & 0xFF] * C)})


def test_a_rollback_restores_sums_an_earlier_frame_of_the_batch_read():
    """Slot 0 holds round 1's result. One batch: a retransmission of round 1 (answered from
    the stored sums), round 3's first contribution (overwrites them), then a far-ahead round
    that the C path cannot take (AHEAD): it rolls back and the Python path replays the batch,
    whose first frame must still see round 1's sums. The C path decides on the registers
    alone and changes the sums only once the whole batch is taken (``op_t``); frames,
    registers and sums equal the reference's."""
    done = [data(W[r], 30, s, 1, np.full(C, 3 + r)) for s in range(2) for r in range(3)]
    batch = [data(W[0], 30, 0, 1, np.full(C, 3), flags=int(Flag.RETX)),
             data(W[1], 30, 0, 3, np.full(C, 9)),
             data(W[2], 30, 1, 1 + 2 * lay.ROUND_WINDOW + 2, np.full(C, 5))]

    def run(native: bool) -> tuple:
        x = _bench()
        p = x.sw.pipeline
        p.native = p.fast = native
        out = []
        for group in ([done, batch] if native else [[f] for f in done + batch]):
            out += x.sw.process_frames(group)
        return sorted(out), _state(x), p.native_batches

    got, state, nat = run(True)
    want, ref, _ = run(False)
    assert nat == 1                       # the first batch in C, the second rolled back
    assert ref[2] == {int(lay.DropReason.AHEAD): 1}
    resent = [f for _, f in want if f[14 + 20 + 8 + 2] & int(Flag.RESENT)]
    assert len(resent) == 1 and set(resent[0][PAYLOAD_OFFSET:]) == {(TABLE[3] + TABLE[4]
                                                                       + TABLE[5]) & 0xFF}
    assert got == want and state == ref


def test_a_rollback_after_an_add_leaves_the_sums_unadded():
    """Rank 0 opened round 1 of slots 0 and 1 in an earlier batch. One batch: rank 1 adds to it (a
    copy not yet touched in the call, so nothing overwrites its sums), then a far-ahead round
    the C path cannot take: the Python path replays the batch, and rank 1 must be counted once.
    A C path that had already added rank 1 before rolling back would count it twice; the
    result rank 2 completes is the sum of the three, byte for byte the reference's."""
    first = [data(W[0], 30, 0, 1, np.full(C, 3)), data(W[0], 30, 1, 1, np.full(C, 3))]
    batch = [data(W[1], 30, 0, 1, np.full(C, 4)),
             data(W[2], 30, 1, 1 + 2 * lay.ROUND_WINDOW + 2, np.full(C, 5))]
    last = [data(W[2], 30, 0, 1, np.full(C, 6))]

    def run(native: bool) -> tuple:
        x = _bench()
        p = x.sw.pipeline
        p.native = p.fast = native
        out = []
        for group in ([first, batch, last] if native else [[f] for f in first + batch + last]):
            out += x.sw.process_frames(group)
        return sorted(out), _state(x), p.native_batches

    got, state, nat = run(True)
    want, ref, _ = run(False)
    assert nat == 2                       # the first and last batches in C
    assert ref[2] == {int(lay.DropReason.AHEAD): 1}
    assert len(want) == 3 and all(set(f[PAYLOAD_OFFSET:]) == {(TABLE[3] + TABLE[4] + TABLE[6])
                                                             & 0xFF} for _, f in want)
    assert got == want and state == ref


def test_a_peek_mid_batch_falls_back_with_nothing_changed():
    """A status request is not the C path's case: the whole batch goes to the Python path."""
    frames = [data(W[0], 30, 0, 1, np.full(C, 3)), data(W[1], 30, 0, 1, np.full(C, 4)),
              data(W[0], 30, 0, 1, np.full(C, 3), flags=int(Flag.RETX | Flag.PEEK)),
              data(W[2], 30, 0, 1, np.full(C, 7))]
    got, state, nat = _run(frames, native=True, batch=True)
    want, ref, _ = _run(frames, native=False, batch=False)
    assert nat == 0
    assert sorted(got) == sorted(want) and state == ref and ref[6]["peek"] == 1


def test_a_job_with_a_parent_runs_in_c():
    """A leaf's completion: the partial goes up to the parent from the C path (issue 17)."""
    frames = [data(W[r], 30, 0, 0, np.full(C, r + 1)) for r in range(3)]
    got, state, nat = _run(frames, native=True, batch=True, parent=True)
    want, ref, _ = _run(frames, native=False, batch=False, parent=True)
    assert nat == 1 and got == want and state == ref and len(got) == 1
    port, f = got[0]
    assert port == 7 and f[43] == int(MsgType.PARTIAL) and f[66] == 3


# -- the tree and DEADLINE (issue 17): a leaf with a parent, a child switch among the
# contributors, results from the parent, releases -------------------------------------------
CHILD = Peer(3, 5, "10.0.0.5", "02:00:00:00:00:05", is_switch=True)
PARENT = Peer(0, 7, "10.9.9.9", "02:00:00:00:00:99")


def _tree_bench(lane_bits: int, parent: bool) -> Bench:
    x = Bench(pool_slots=8)
    kw = {"parent": (PARENT.port, PARENT.ip), "self_id": 2} if parent else {}
    x.job(30, [W[0], W[1], CHILD], num_slots=2, lane_bits=lane_bits, members=W[:2], **kw)
    return x


def _tree_frames(spec, lane_bits: int):
    out = []
    for who, slot, rnd, flags, fill in spec:
        if who == "child":       # a child switch's partial: its lanes, count and bitmap
            out.append(data(CHILD, 30, slot, rnd, np.full(C, fill * 3), flags=flags,
                            msg_type=MsgType.PARTIAL, lane_bits=lane_bits, count=2,
                            bitmap=0b1100))
        elif who == "parent":    # the parent's result
            out.append(data(PARENT, 30, slot, rnd, np.full(C, fill * 5), flags=flags,
                            msg_type=MsgType.RESULT, lane_bits=lane_bits, rank=lay.RANK_ALL,
                            count=4, bitmap=0b1111))
        else:
            out.append(data(INTRUDER if who == 3 else W[who], 30, slot, rnd, np.full(C, fill),
                            flags=flags))
    return out


def _run_tree(frames, native: bool, batch: bool, lane_bits: int, parent: bool) -> tuple:
    return _process(_tree_bench(lane_bits, parent), frames, native, batch)


_tree_packet = st.tuples(
    st.sampled_from([0, 1, "child", "child", "parent", "parent", 0, 1, 3]),
    st.integers(0, 1),                                   # slot
    st.sampled_from([0, 0, 1, 2, ROUND_MASK]),           # round (incl. wrap)
    st.sampled_from([0, 0, 0, int(Flag.RETX), int(Flag.DEADLINE),
                     int(Flag.RETX | Flag.DEADLINE), int(Flag.PEEK)]),
    st.integers(0, 15),                                  # fill
)


@settings(max_examples=120, deadline=None)
@given(st.lists(_tree_packet, min_size=1, max_size=30), st.sampled_from([8, 16, 32]),
       st.booleans())
def test_tree_and_deadline_batches_match_the_reference(spec, lane_bits, parent):
    """Partials up, partials in, parent results, DEADLINE releases, answers, re-sent partials,
    STALE and DUPLICATE drops: the C path gives the reference's frames, state and counters,
    and takes every batch of its case."""
    frames = _tree_frames(spec, lane_bits)
    want, ref, _ = _run_tree(frames, False, False, lane_bits, parent)
    got, state, nat = _run_tree(frames, True, True, lane_bits, parent)
    assert sorted(got) == sorted(want)
    assert state == ref
    c_case = all(w != 3 and not f & Flag.PEEK and (parent or w != "parent")
                 for w, _s, _r, f, _x in spec)
    assert nat == int(c_case)


def test_a_dead_rank_round_stays_in_c():
    """The partial policy with a dead rank (W[1]): contributions, one DEADLINE release, a late
    DEADLINE answered with the stored result -- one C batch each, counted as the reference."""
    batches = [[data(W[0], 30, 0, 4, np.full(C, 2)), data(CHILD, 30, 0, 4, np.full(C, 9),
                                                          msg_type=MsgType.PARTIAL, lane_bits=16,
                                                          count=2, bitmap=0b1100)],
               [data(W[0], 30, 0, 4, np.full(C, 2), flags=int(Flag.RETX | Flag.DEADLINE))],
               [data(CHILD, 30, 0, 4, np.full(C, 9), flags=int(Flag.RETX | Flag.DEADLINE),
                     msg_type=MsgType.PARTIAL, lane_bits=16, count=2, bitmap=0b1100)]]

    def run(native: bool):
        x = _tree_bench(16, parent=False)
        p = x.sw.pipeline
        p.native = native
        out = [x.sw.process_frames(b) for b in batches]
        return out, _state(x), p.native_batches

    got, state, nat = run(True)
    want, ref, _ = run(False)
    assert nat == 3 and got == want and state == ref
    assert [len(o) for o in got] == [0, 2, 1]          # multicast to W0, W1; one answer
    assert state[6] == {"contribution": 2, "release": 1, "resent": 1}
    assert state[4][0] == 1 and state[5][0] == 1        # results (one release), resent


def _rows(frames) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A receive buffer holding (port, frame) pairs: rows, lengths, ingress ports."""
    n = len(frames)
    buf = np.zeros((n, ROW), dtype=np.uint8)
    lens = np.zeros(n, dtype=np.int64)
    ports = np.zeros(n, dtype=np.int64)
    for i, (port, f) in enumerate(frames):
        buf[i, : len(f)] = np.frombuffer(f, dtype=np.uint8)
        lens[i], ports[i] = len(f), port
    return buf, lens, ports


def test_arrival_order_from_several_ports_is_kept():
    """Rows in port order, receive stamps in another: both paths follow the stamps."""
    frames = [data(W[r], 30, 0, rnd, np.full(C, r + rnd)) for rnd in (0, 2) for r in range(3)]
    stamps = np.array([1, 2, 0, 4, 5, 3], dtype=np.int64)   # not in row (port) order

    def run(native: bool):
        x = _bench()
        p = x.sw.pipeline
        p.native = native
        n = len(frames)
        buf, lens, ports = _rows(frames)
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
    buf, lens, ports = _rows(frames)
    from host.softswitch.controls.native import native_job
    cfg = p.cfg
    job = native_job(cfg, int(cfg.job_map[30]))
    acc = np.full(n, -1, dtype=np.int64)
    out = p.out
    out.reserve(n * 3)
    res = pl_mod._fastpath.process(buf, lens, ports, n, None, job, p.native_state(cfg),
                                   p.native_consts(), (out.buf, out.lens, out.ports), acc)
    assert res is not None and res[3] == n and acc.tolist() == [0, 1, 2]
    # a status request (PEEK) is not taken: nothing accepted, nothing written
    acc[:] = -1
    stale = data(W[0], 30, 1, 1, np.full(C, 0), flags=int(Flag.PEEK))[1]
    buf[0, : len(stale)] = np.frombuffer(stale, dtype=np.uint8)
    res = pl_mod._fastpath.process(buf, lens, ports, 1, None, job, p.native_state(cfg),
                                   p.native_consts(), (out.buf, out.lens, out.ports), acc)
    assert res is None and acc.tolist() == [-1, -1, -1]


def test_the_scalar_add_matches_the_reference_too():
    """Where the CPU has AVX2 the DATA add runs with vectors; machines without take the 64-bit
    table add. Both must equal the reference: the comparisons above run again in a process with
    the vector add switched off (``NETCO_FASTPATH_SIMD=0``, read once per process)."""
    import os
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
         "-k", "matches_the_packet_by_packet or equal_the_numpy_path or tree_and_deadline"],
        env={**os.environ, "NETCO_FASTPATH_SIMD": "0"}, capture_output=True, text=True,
        timeout=600, check=False, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.dirname(os.path.abspath(__file__))))))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert " passed" in p.stdout and "skipped" not in p.stdout.splitlines()[-1]


@pytest.mark.parametrize("lane_bits", [8, 16])
def test_partials_wrap_as_their_lanes_in_c_and_in_the_reference(lane_bits):
    """Sums kept as wide as the lanes (``Pipeline.sums_for``): two child switches' partials
    whose lanes overflow the width give the sums modulo 2^lane_bits, as 32-bit sums
    truncated on output would; the C path (one batch) and the reference (frame by frame)
    agree on frames, registers and the packed sums, and nothing behind a copy's packed sums
    is written."""
    kids = [Peer(0, 5, "10.0.2.254", "02:00:00:00:02:fe", True),
            Peer(1, 6, "10.0.3.254", "02:00:00:00:03:fe", True)]
    top = (1 << lane_bits) - 1
    a, c = np.full(C, top), (np.arange(C) * 97) % (top + 1)
    frames = [data(kids[0], 12, 1, 3, a, msg_type=MsgType.PARTIAL, lane_bits=lane_bits,
                   count=2, bitmap=0b0011),
              data(kids[1], 12, 1, 3, c, msg_type=MsgType.PARTIAL, lane_bits=lane_bits,
                   count=3, bitmap=0b1100)]

    def run(native: bool) -> tuple:
        x = Bench(pool_slots=8)
        x.job(12, kids, num_slots=2, lane_bits=lane_bits)
        p = x.sw.pipeline
        p.native = p.fast = native
        out = [o for g in ([frames] if native else [[f] for f in frames])
               for o in x.sw.process_frames(g)]
        return out, _state(x), p.native_batches, p

    got, state, nat, p = run(True)
    want, ref, _, _ = run(False)
    assert nat == 1 and got == want and state == ref and len(got) == 2
    dt = {8: np.uint8, 16: ">u2"}[lane_bits]
    for _, f in got:
        lanes = np.frombuffer(f[PAYLOAD_OFFSET:], dtype=dt)
        np.testing.assert_array_equal(lanes, (a + c) % (top + 1))
    cell = (1 << 2) | 1                   # slot 1, the copy of odd rounds
    np.testing.assert_array_equal(p.sums_for(lane_bits)[cell], (a + c) % (top + 1))
    assert not p.sums.view(np.uint8)[cell, C * lane_bits // 8:].any()


@pytest.mark.parametrize("lane_bits", [8, 16, 32])
def test_data_adds_at_every_lane_width_run_in_c(lane_bits):
    """DATA of three workers into sums as wide as the lanes, in C: the first contributor
    overwrites, the second adds in the same batch, the third adds in a later batch (its copy
    untouched in that call); the result is the THC sum, and frames, registers and sums equal
    the reference's."""
    rng = np.random.default_rng(lane_bits)
    idx = [rng.integers(0, 16, C) for _ in range(3)]
    batches = [[data(W[0], 30, 1, 7, idx[0]), data(W[1], 30, 1, 7, idx[1])],
               [data(W[2], 30, 1, 7, idx[2])]]

    def run(native: bool) -> tuple:
        x = _bench(lane_bits=lane_bits)
        p = x.sw.pipeline
        p.native = p.fast = native
        groups = batches if native else [[f] for b in batches for f in b]
        out = [o for g in groups for o in x.sw.process_frames(g)]
        return out, _state(x), p.native_batches

    got, state, nat = run(True)
    want, ref, _ = run(False)
    assert nat == 2 and got == want and state == ref and len(got) == 3
    dt = {8: np.uint8, 16: ">u2", 32: ">u4"}[lane_bits]
    t = np.asarray(TABLE)
    for _, f in got:
        np.testing.assert_array_equal(np.frombuffer(f[PAYLOAD_OFFSET:], dtype=dt),
                                      sum(t[i] for i in idx))
