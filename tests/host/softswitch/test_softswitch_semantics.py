"""Semantics of the software target's data plane, in-process (no sockets): one behaviour of
the v1model program (docs/protocol.md) per test, plus batch == one-by-one processing."""

from __future__ import annotations

import struct

import finsy as fy
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host.protocol import codec
from host.protocol import layout as lay
from host.protocol.layout import DropReason as R
from host.protocol.layout import Flag, MsgType
from host.softswitch.frames import ipv4_checksum, read_frame, thc_frame, udp_frame
from tests.support.softswitch import SELF_IP, TABLE, Bench, C, Peer, data, sums, worker
from tests.support.token import TOKEN

W = [worker(r) for r in range(4)]
INTRUDER = Peer(0, 9, "10.0.0.9", "02:00:00:00:00:09")
rng = np.random.default_rng(5)


def rand_idx(n=C):
    return rng.integers(0, 16, n)


def test_sums_multicast_to_members_with_their_addresses():
    b = Bench()
    b.job(5, W[:3])
    idxs = [rand_idx() for _ in range(3)]
    out = b.send(*(data(W[r], 5, 2, 0, idxs[r], chunk_offset=77) for r in range(3)))
    assert sorted(p for p, _ in out) == [1, 2, 3]
    for port, (dmac, src, dst, m) in out:
        w = W[port - 1]
        assert (dmac, src, dst) == (w.mac, SELF_IP, w.ip)
        h = m.header
        assert (h.msg_type, h.rank, h.count, h.bitmap, h.flags) == (MsgType.RESULT, 255, 3, 0b111, 0)
        assert (h.slot, h.round, h.chunk_offset, h.lane_bits) == (2, 0, 77, 8)
        np.testing.assert_array_equal(m.values, sums(idxs))
    assert b.counter("contributions")[0] == 3 and b.counter("results")[0] == 1
    assert b.drops() == {}


def test_each_job_uses_its_own_table_in_one_batch():
    b = Bench()
    t2 = list(range(16))
    b.job(1, W[:2], index=0, slot_base=0)
    b.job(2, W[2:4], index=1, slot_base=8, table=t2, lane_bits=16)
    # W[2], W[3] are ranks 2, 3 globally but ranks 0, 1 of job 2: bind them as such
    b2 = Bench()
    b2.job(1, W[:2], index=0, slot_base=0)
    j2 = [Peer(0, 3, W[2].ip, W[2].mac), Peer(1, 4, W[3].ip, W[3].mac)]
    b2.job(2, j2, index=1, slot_base=8, table=t2, lane_bits=16)
    ia, ib = [rand_idx() for _ in range(2)], [rand_idx() for _ in range(2)]
    frames = [data(W[0], 1, 0, 0, ia[0]), data(j2[0], 2, 0, 0, ib[0]),
              data(W[1], 1, 0, 0, ia[1]), data(j2[1], 2, 0, 0, ib[1])]
    out = b2.send(*frames)
    res = {(p, m.header.job_id): m for p, (_, _, _, m) in out}
    assert set(res) == {(1, 1), (2, 1), (3, 2), (4, 2)}
    np.testing.assert_array_equal(res[(1, 1)].values, sums(ia))
    np.testing.assert_array_equal(res[(3, 2)].values, sums(ib, t2))
    assert res[(3, 2)].header.lane_bits == 16


def test_two_copies_of_a_slot_aggregate_independently():
    b = Bench()
    b.job(3, W[:2])
    i0, i1 = [rand_idx() for _ in range(2)], [rand_idx() for _ in range(2)]
    out = b.send(data(W[0], 3, 1, 0, i0[0]), data(W[0], 3, 1, 1, i1[0]),
                 data(W[1], 3, 1, 1, i1[1]), data(W[1], 3, 1, 0, i0[1]))
    by_round = {m.header.round: m for _, (_, _, _, m) in out}
    np.testing.assert_array_equal(by_round[1].values, sums(i1))
    np.testing.assert_array_equal(by_round[0].values, sums(i0))
    # round 2 reuses copy 0: the first contributor overwrites, nothing of round 0 leaks
    i2 = [rand_idx() for _ in range(2)]
    out = b.send(data(W[0], 3, 1, 2, i2[0]), data(W[1], 3, 1, 2, i2[1]))
    np.testing.assert_array_equal(out[0][1][3].values, sums(i2))


def test_duplicate_stale_and_resend():
    b = Bench()
    b.job(4, W[:2])
    idx = [rand_idx() for _ in range(2)]
    assert b.send(data(W[0], 4, 0, 6, idx[0])) == []
    assert b.send(data(W[0], 4, 0, 6, idx[0], flags=Flag.RETX)) == []
    assert b.drops() == {R.DUPLICATE: 1}
    b.send(data(W[1], 4, 0, 6, idx[1]))
    # retransmission after completion: the stored result, to the sender only, rank kept
    out = b.send(data(W[1], 4, 0, 6, rand_idx(), flags=Flag.RETX))
    assert len(out) == 1 and out[0][0] == W[1].port
    dmac, _src, dst, m = out[0][1]
    assert (dst, dmac, m.header.flags, m.header.rank) == (W[1].ip, W[1].mac, Flag.RESENT, 1)
    np.testing.assert_array_equal(m.values, sums(idx))
    assert b.counter("resent")[0] == 1
    # round 4 is older than 6 in copy 0: stale
    b.send(data(W[0], 4, 0, 4, idx[0]))
    assert b.drops() == {R.DUPLICATE: 1, R.STALE: 1}


def test_round_serial_number_wraps():
    b = Bench()
    b.job(6, W[:1])
    top = lay.ROUND_MASK
    assert len(b.send(data(W[0], 6, 0, top, rand_idx()))) == 1
    assert len(b.send(data(W[0], 6, 0, 1, rand_idx()))) == 1      # 1 is newer than 2^48-1
    assert b.send(data(W[0], 6, 0, top, rand_idx())) == []          # and 2^48-1 older than 1
    assert b.drops() == {R.STALE: 1}


def test_rounds_are_48_bit_serial_numbers():
    """``round_hi`` carries a round's high 16 bits (issue 33, the session identity): round 8
    is 2^32 - 2 rounds behind a copy at 2^32 + 6, so it is older, START or not, though its low
    32 bits alone (8 against 6) call it newer. So a packet of a session 35.8 minutes (2^31 µs)
    or more earlier no longer reopens a copy."""
    b = Bench()
    b.job(6, W[:1])
    assert len(b.send(data(W[0], 6, 0, 1 << 32 | 6, rand_idx()))) == 1
    assert b.send(data(W[0], 6, 0, 8, rand_idx(), flags=int(Flag.START))) == []
    assert b.send(data(W[0], 6, 0, 8, rand_idx())) == []
    assert b.drops() == {R.STALE: 2}
    out = b.send(data(W[0], 6, 0, 1 << 32 | 8, rand_idx()))        # the copy's next round
    assert len(out) == 1 and out[0][1][3].header.round_hi == 1     # results carry round_hi


def test_norm_maximum_separate_from_data_slots():
    b = Bench()
    b.job(8, W[:3])
    norms = [rng.uniform(0, 100, lay.NORMS_PER_PACKET).astype(np.float32) for _ in range(3)]
    idx = [rand_idx() for _ in range(3)]
    frames = []
    for r in range(3):
        frames.append(data(W[r], 8, 0, 0, norms[r], msg_type=MsgType.NORM, lane_bits=32))
        frames.append(data(W[r], 8, 0, 0, idx[r]))
    out = b.send(*frames)
    got = {m.header.msg_type: m for _, (_, _, _, m) in out}
    assert set(got) == {MsgType.NORM_RESULT, MsgType.RESULT}
    np.testing.assert_array_equal(got[MsgType.NORM_RESULT].values, np.max(norms, axis=0))
    assert got[MsgType.NORM_RESULT].header.lane_bits == 32
    np.testing.assert_array_equal(got[MsgType.RESULT].values, sums(idx))


def test_lanes_truncate_to_the_jobs_width():
    # A controller error (4 x 255 needs more than 8 bits): the result carries the sums
    # truncated to the lanes, as the P4 program's emit does; it never crashes or widens. The
    # software target keeps the sums as wide as the lanes (Pipeline.sums_for): modulo 2^8,
    # the same bytes, packed at the start of the copy's row, the rest of the row untouched.
    b = Bench()
    b.job(9, W[:4], lane_bits=8, table=[*range(0, 240, 16), 255])
    out = b.send(*(data(W[r], 9, 0, 0, np.full(C, 15)) for r in range(4)))
    assert out[0][1][3].values[0] == (4 * 255) & 0xFF
    p = b.sw.pipeline
    touched = np.flatnonzero(p.sums.any(axis=1))
    assert len(touched) == 1
    assert (p.sums_for(8)[touched[0]] == (4 * 255) & 0xFF).all()
    assert not p.sums.view(np.uint8)[touched[0], C:].any()


def test_child_switch_partial_up_parent_result_down():
    b = Bench()
    parent = (7, "10.0.1.254")
    b.job(11, W[:2], parent=parent, self_id=3, lane_bits=16)
    idx = [rand_idx() for _ in range(2)]
    out = b.send(data(W[0], 11, 1, 0, idx[0]), data(W[1], 11, 1, 0, idx[1]))
    assert len(out) == 1 and out[0][0] == 7
    _, src, dst, m = out[0][1]
    h = m.header
    assert (src, dst, h.msg_type, h.rank, h.count, h.bitmap, h.flags, h.lane_bits) == \
        (SELF_IP, parent[1], MsgType.PARTIAL, 3, 2, 0b11, 0, 16)
    np.testing.assert_array_equal(m.values, sums(idx))
    # a retransmission while waiting re-sends the partial up, flagged RETX
    out = b.send(data(W[0], 11, 1, 0, idx[0], flags=Flag.RETX))
    assert out[0][0] == 7 and out[0][1][3].header.flags == Flag.RETX
    # results are accepted only from the parent's port and address
    total = np.arange(C) * 3
    res = codec.Header(msg_type=MsgType.RESULT, job_id=11, slot=1, round=0, rank=255, lane_bits=16,
                       token=TOKEN, count=4, bitmap=0b1111)
    wrong = thc_frame("02:00:00:00:01:fe", "10.0.1.254", SELF_IP, res, total)
    assert b.send((W[0].port, wrong)) == []
    assert b.drops() == {R.BAD_SENDER: 1}
    other = codec.Header(msg_type=MsgType.RESULT, job_id=11, slot=1, round=2, rank=255, lane_bits=16,
                         token=TOKEN)
    assert b.send((7, thc_frame("02:00:00:00:01:fe", "10.0.1.254", SELF_IP, other, total))) == []
    assert b.drops() == {R.BAD_SENDER: 1, R.STALE: 1}
    out = b.send((7, wrong))
    assert sorted(p for p, _ in out) == [1, 2]
    for _, (_, _, _, m) in out:
        assert (m.header.count, m.header.bitmap, m.header.msg_type) == (4, 0b1111, MsgType.RESULT)
        np.testing.assert_array_equal(m.values, total)
    # stored: a later retransmission is answered here with the parent's result
    out = b.send(data(W[1], 11, 1, 0, idx[1], flags=Flag.RETX))
    assert out[0][0] == 2 and out[0][1][3].header.flags == Flag.RESENT
    np.testing.assert_array_equal(out[0][1][3].values, total)


def test_parent_adds_partials_with_their_count_and_bitmap():
    b = Bench()
    kids = [Peer(0, 5, "10.0.2.254", "02:00:00:00:02:fe", True),
            Peer(1, 6, "10.0.3.254", "02:00:00:00:03:fe", True)]
    b.job(12, kids, lane_bits=16)
    a, c = np.arange(C), np.arange(C)[::-1]
    p0 = data(kids[0], 12, 0, 0, a, msg_type=MsgType.PARTIAL, lane_bits=16, count=2, bitmap=0b0011)
    p1 = data(kids[1], 12, 0, 0, c, msg_type=MsgType.PARTIAL, lane_bits=16, count=3, bitmap=0b1100)
    out = b.send(p0, p1)
    assert sorted(p for p, _ in out) == [5, 6]
    m = out[0][1][3]
    assert (m.header.count, m.header.bitmap) == (5, 0b1111)
    np.testing.assert_array_equal(m.values, a + c)
    # a switch message from a worker binding, a worker message from a switch binding, lane width
    b.job(13, [W[0]], index=1, slot_base=8)
    b.send(data(W[0], 13, 0, 0, a, msg_type=MsgType.PARTIAL, lane_bits=8),
           data(kids[0], 12, 0, 2, rand_idx()),
           data(kids[0], 12, 0, 2, a, msg_type=MsgType.PARTIAL, lane_bits=8))
    assert b.drops() == {R.BAD_SENDER: 2, R.MALFORMED: 1}


def _raw(p: Peer, payload: bytes) -> tuple[int, bytes]:
    return p.port, udp_frame(p.mac, "02:00:00:00:ff:fe", p.ip, SELF_IP, payload)


def test_every_drop_reason_is_counted_and_changes_nothing():
    b = Bench()
    b.job(20, W[:2], num_slots=4)
    b.write([  # job 21: a job entry and W[0]'s binding, but no THC table entry
        fy.P4TableEntry("ingress.thc_validate.jobs", match=fy.P4TableMatch(job_id=21),
                        action=fy.P4TableAction(
                            "ingress.thc_validate.set_job", index=2, slot_base=16, num_slots=4,
                            expected=1, lane_bits=8, mcast_grp=1, has_parent=0, parent_port=0,
                            parent_addr="0.0.0.0", self_addr=SELF_IP, self_id=0, token=TOKEN)),
        fy.P4TableEntry("ingress.thc_validate.senders",
                        match=fy.P4TableMatch(job_id=21, rank=0, ingress_port=1, src_addr=W[0].ip),
                        action=fy.P4TableAction("ingress.thc_validate.sender", is_switch=0,
                                                                udp_port=0))])
    good = codec.encode(codec.Header(token=TOKEN, msg_type=MsgType.DATA, job_id=20, slot=0, round=0, rank=0),
                        np.full(C, 15))
    hdr = bytearray(good)
    cases = {
        R.SHORT: [bytes(hdr[:20]), bytes(hdr[:100])],
        R.BAD_VERSION: [bytes([lay.THC_VERSION + 1]) + bytes(hdr[1:])],
        R.BAD_TYPE: [bytes(hdr[:1]) + bytes([0]) + bytes(hdr[2:]),
                     bytes(hdr[:1]) + bytes([9]) + bytes(hdr[2:])],
        R.MALFORMED: [
            bytes(hdr[:3]) + bytes([16]) + bytes(hdr[4:]),                    # DATA with 16-bit lanes
            bytes(hdr[:7]) + bytes([1]) + bytes(hdr[8:]),                     # set != round parity
            bytes(hdr[:10]) + struct.pack("!H", C + 1) + bytes(hdr[12:]),     # too many elements
            bytes(hdr[:6]) + bytes([40]) + bytes(hdr[7:]),                    # rank >= 32
        ],
        R.UNKNOWN_JOB: [bytes(hdr[:4]) + struct.pack("!H", 999) + bytes(hdr[6:]),
                        bytes(hdr[:4]) + struct.pack("!H", 21) + bytes(hdr[6:])],
        R.BAD_SLOT: [bytes(hdr[:8]) + struct.pack("!H", 4) + bytes(hdr[10:])],
    }
    frames = [_raw(W[0], p) for ps in cases.values() for p in ps]
    frames.append(data(INTRUDER, 20, 0, 0, np.full(C, 15)))                   # BAD_SENDER
    frames.append(data(W[1], 20, 0, 0, np.full(C, 15), rank=0))               # someone else's rank
    frames.append((1, b"\x00" * 6 + b"\x02" * 6 + b"\x08\x06" + b"\x00" * 28))  # ARP: NOT_IPV4
    frames.append((1, udp_frame(W[0].mac, "02:00:00:00:ff:fe", W[0].ip, "192.168.9.9", b"x", 1, 2)))
    frames.append((1, udp_frame(W[0].mac, "02:00:00:00:ff:fe", W[0].ip, "192.168.9.9", b"x", 1, 2, ttl=1)))
    assert b.send(*frames) == []
    want = {int(r): len(ps) for r, ps in cases.items()}
    want.update({R.BAD_SENDER: 2, R.NOT_IPV4: 1, R.NO_ROUTE: 1, R.TTL_EXPIRED: 1})
    assert b.drops() == want
    assert b.counter("contributions").sum() == 0
    # nothing was touched: a clean round still sums exactly
    idx = [rand_idx() for _ in range(2)]
    out = b.send(data(W[0], 20, 0, 0, idx[0]), data(W[1], 20, 0, 0, idx[1]))
    np.testing.assert_array_equal(out[0][1][3].values, sums(idx))
    assert out[0][1][3].header.count == 2


def test_bytes_behind_the_payload_stay_behind_the_result():
    b = Bench()
    b.job(22, W[:1])
    port, frame = data(W[0], 22, 0, 0, rand_idx())
    out = b.sw.process_frames([(port, frame + b"TAIL")])
    assert out[0][1].endswith(b"TAIL")
    assert len(out[0][1]) == 14 + 20 + 8 + codec.message_bytes(MsgType.RESULT, 8) + 4


# -- batch == one by one ------------------------------------------------------------------
PEERS = [*W[:3], INTRUDER]
_packet = st.tuples(
    st.integers(0, 3),                                   # peer
    st.integers(0, 1),                                   # slot
    st.integers(0, 4),                                   # round
    st.sampled_from([0, Flag.RETX, Flag.DEADLINE, Flag.PEEK]),
    st.booleans(),                                       # norm
    st.integers(0, 15),                                  # fill value
)


def _frames(spec):
    out = []
    for peer, slot, rnd, flags, norm, fill in spec:
        p = PEERS[peer]
        if norm:
            out.append(data(p, 30, slot, rnd, np.full(lay.NORMS_PER_PACKET, fill, np.float32),
                            flags=int(flags), msg_type=MsgType.NORM, lane_bits=32))
        else:
            out.append(data(p, 30, slot, rnd, np.full(C, fill), flags=int(flags)))
    return out


def _run(frames, batch: bool, fast: bool):
    x = Bench(pool_slots=8)
    x.job(30, W[:3], num_slots=2)
    x.sw.pipeline.fast = fast
    one_by_one = [[f] for f in frames]
    out = [o for fs in ([frames] if batch else one_by_one) for o in x.sw.process_frames(fs)]
    assert all(ipv4_checksum(f[14:34]) == 0 for _, f in out)
    return x, sorted(out)


@settings(max_examples=60, deadline=None)
@given(st.lists(_packet, min_size=1, max_size=40))
def test_one_batch_equals_one_packet_at_a_time(spec):
    """The reference is the packet-by-packet slot logic (P4 order); a batch through the
    vectorized fast path, a batch through the loop and single packets all agree with it."""
    frames = _frames(spec)
    ref, want = _run(frames, batch=False, fast=False)
    for batch, fast in ((True, True), (True, False), (False, True)):
        got, out = _run(frames, batch, fast)
        assert out == want, (batch, fast)
        assert got.drops() == ref.drops()
        for k, arr in ref.sw.pipeline.state().items():
            np.testing.assert_array_equal(got.sw.pipeline.state()[k], arr, err_msg=k)
        np.testing.assert_array_equal(got.sw.pipeline.sums, ref.sw.pipeline.sums)
        # every frame has exactly one fate: a drop reason or one of the outcomes
        pl = got.sw.pipeline
        assert sum(got.drops().values()) + sum(pl.outcomes.values()) == pl.rx == len(frames)
        assert pl.outcomes["contribution"] == got.counter("contributions").sum()
        assert pl.outcomes["resent"] == got.counter("resent").sum()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 3)), min_size=1,
                max_size=60))
def test_plain_contributions_fast_path_matches(spec):
    """Batches of plain contributions (the fast path's domain, incl. its fallbacks)."""
    frames = [data(W[p], 30, slot, rnd, np.full(C, (p + rnd) % 16)) for p, slot, rnd in spec]
    ref, want = _run(frames, batch=False, fast=False)
    got, out = _run(frames, batch=True, fast=True)
    assert out == want and got.drops() == ref.drops()
    np.testing.assert_array_equal(got.sw.pipeline.sums, ref.sw.pipeline.sums)


@pytest.mark.parametrize("n", [1, 2, 8])
def test_frames_built_here_parse_back(n):
    h = codec.Header(token=TOKEN, msg_type=MsgType.DATA, job_id=n, slot=1, round=2, rank=0)
    f = thc_frame("02:00:00:00:00:01", "10.0.0.1", SELF_IP, h, np.arange(n) % 16)
    _dmac, src, dst, m = read_frame(f)
    assert (src, dst, m.header.job_id) == ("10.0.0.1", SELF_IP, n)
    np.testing.assert_array_equal(m.values, np.arange(n) % 16)
    assert TABLE[15] == 30


def test_overlapping_job_ranges_follow_each_packets_job():
    """A controller error (two jobs on the same slots) still gets packet-by-packet semantics:
    each frame uses its own job's expected count."""
    j2 = [Peer(2, 3, W[2].ip, W[2].mac)]
    frames = [data(W[0], 40, 0, 0, np.full(C, 1)), data(j2[0], 41, 0, 0, np.full(C, 2)),
              data(W[1], 40, 0, 0, np.full(C, 3))]

    def run(batch: bool, fast: bool):
        x = Bench(pool_slots=8)
        # The software target's P4Runtime side now refuses overlapping ranges (see
        # test_overlapping_slot_ranges_are_refused); the data plane must still agree with itself.
        x.store.entry_check = None
        x.job(40, W[:2], index=0, num_slots=2, expected=3)
        x.job(41, j2, index=1, num_slots=2, expected=2)   # same slot_base 0: overlapping
        x.sw.pipeline.fast = fast
        groups = [frames] if batch else [[f] for f in frames]
        return sorted(o for g in groups for o in x.sw.process_frames(g)), x.drops()

    want = run(False, False)
    # job 41's frame completed the copy (its expected is 2); job 40's second worker came
    # after completion and gets the stored result flagged RESENT
    late = [read_frame(f)[3].header for p, f in want[0] if p == W[1].port]
    assert [h.flags for h in late] == [Flag.RESENT] and want[1] == {}
    assert run(True, True) == want
