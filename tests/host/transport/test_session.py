"""host/transport/session.py: the start-up check names what differs from the switch, and a
session opens above every round an earlier one used, however long ago (issue "Attach and
operate from the outside", items 2 and 3). The switch is the software target on loopback UDP
(``control_plane.embedded.EmbeddedNetwork``), a process of its own."""

from __future__ import annotations

import pytest
import torch

from control_plane.embedded import EmbeddedNetwork
from host.protocol import codec as wire
from host.protocol import layout as lay
from host.thc import THCCodec
from host.thc.simulate import allreduce as simulated_allreduce
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.jobfile import mask_token
from host.transport.ports import UdpEndpoint
from host.transport.session import (
    EPOCH_STEP,
    ROUND_STEP,
    JobCheckError,
    ThreadAgreement,
    candidate,
    check_job,
    first_candidate,
    open_session,
    start_session,
)
from host.transport.slots import SlotConfig
from tests.support.transport import run_workers, worker_data

SLOTS = SlotConfig(give_up=5.0)


@pytest.fixture(scope="module")
def net():
    with EmbeddedNetwork(2, num_slots=4) as n:
        yield n


def _agg(net: EmbeddedNetwork, rank: int, **spec) -> NetworkAggregator:
    a = net.address(rank)
    fields = {"num_slots": net.num_slots, "token": net.token, **spec}
    return NetworkAggregator(UdpEndpoint(a.switch, bind=(a.ip, 0)),
                             JobSpec(net.job_id, rank, net.workers, **fields), SLOTS)


def _session(net: EmbeddedNetwork, first: int, xs: list[torch.Tensor]):
    """Both ranks open a session at ``first``, then all-reduce ``xs``: (candidate, results)."""
    aggs = [_agg(net, r) for r in range(net.workers)]
    agree = ThreadAgreement(net.workers)
    codec = THCCodec()

    def work(r: int):
        cand = start_session(aggs[r], first, SLOTS, agree)
        return cand, aggs[r].allreduce(xs[r], codec)

    try:
        got = run_workers(net.workers, work, timeout=60)
    finally:
        for a in aggs:
            a.close(finish=False)
    assert got[0][0] == got[1][0]
    return got[0][0], [g[1] for g in got], aggs


def test_sessions_open_above_earlier_ones_whatever_the_clock(net):
    codec = THCCodec()
    xs = worker_data(2, 3000, seed=3)
    want = simulated_allreduce(codec, xs, round=0).average
    t0 = first_candidate()
    cand, got, _ = _session(net, t0, xs)
    assert cand == t0                       # an empty switch takes the first candidate
    assert all(torch.equal(g, want) for g in got)
    # a second run with the same defaults
    cand, got, _ = _session(net, first_candidate(), xs)
    assert all(torch.equal(g, want) for g in got)
    # a candidate 2^47 + 4096 rounds on is serially *behind* the copies (mod 2^48): a clock
    # 4.5 years on, or a rank 0 whose clock is behind; its session moves on (2^30, then
    # about 2^46 a try: the copies are 2^47 - 4096 ahead, so the fourth candidate is taken)
    late = (cand + (1 << 47) + 4096) & lay.ROUND_MASK & ~1
    cand2, got, _ = _session(net, late, xs)
    assert cand2 == candidate(late, 3)
    assert all(torch.equal(g, want) for g in got)
    # and later ones: a candidate exactly 2^47 ahead, and one just behind
    for first in ((cand2 + (1 << 47)) & lay.ROUND_MASK, (cand2 - 64) & lay.ROUND_MASK & ~1):
        c, got, _ = _session(net, first, xs)
        assert all(torch.equal(g, want) for g in got)
        cand2 = c


def test_candidates_converge_in_48_and_in_32_bits():
    """Four candidates reach past any copy up to 2^47 - 1 rounds ahead (48-bit rounds), and
    their low 32 bits move 2^30 a try, what a switch comparing 32 bits (the TNA) needs."""
    first = 12345678
    cands = [candidate(first, k) for k in range(4)]
    assert [(c - first) & 0xFFFFFFFF for c in cands] == [k << 30 for k in range(4)]
    for ahead in (1, 1 << 30, (1 << 30) + 1, 1 << 46, EPOCH_STEP + ROUND_STEP,
                  (1 << 47) - 1):
        held = (first + ahead) & lay.ROUND_MASK
        taken = next(k for k, c in enumerate(cands)
                     if 0 < (c - held) & lay.ROUND_MASK < lay.ROUND_OLDER)
        assert taken <= 3


def test_a_candidate_behind_the_copies_is_refused_then_moved_on(net):
    """The failing case the session design answers: a plain window started below the rounds the
    switch's copies hold gets no result (what a second run with round_base 1 met)."""
    xs = worker_data(2, 1000, seed=4)
    cand, _, _ = _session(net, first_candidate(), xs)
    aggs = [_agg(net, r) for r in range(2)]
    try:
        behind = (cand - 1000) & lay.ROUND_MASK & ~1
        oks = run_workers(2, lambda r: open_session(aggs[r], behind, SLOTS, give_up=0.5))
        assert oks == [False, False]
    finally:
        for a in aggs:
            a.close(finish=False)


def test_packets_of_an_earlier_session_never_count(net):
    """A contribution replayed from the previous session (its START round included) meets
    copies that are ahead of it: dropped STALE, the new session's sums stay exact."""
    codec = THCCodec()
    xs = worker_data(2, 2000, seed=5)
    want = simulated_allreduce(codec, xs, round=0).average
    _, _, aggs = _session(net, first_candidate(), xs)
    old_base = aggs[0].spec.round_base
    stale0 = _drops(net).get(int(lay.DropReason.STALE), 0)
    _cand2, got, _ = _session(net, first_candidate(), xs)
    a = net.address(0)
    replay = _replays(net, old_base)
    ep = UdpEndpoint(a.switch, bind=(a.ip, 0))
    try:
        ep.send_many(replay)
    finally:
        ep.close()
    _, got, _ = _session(net, first_candidate(), xs)
    assert all(torch.equal(g, want) for g in got)
    assert _drops(net).get(int(lay.DropReason.STALE), 0) >= stale0 + len(replay)


def _replays(net: EmbeddedNetwork, base: int) -> list[bytes]:
    """Rank 0's START contributions of a session at ``base`` (rounds base..base+2, every data
    slot; all-15 indices, which would show in any sum)."""
    out = []
    for s in range(net.num_slots):
        for r in (base, base + 1, base + 2):
            lo, hi = lay.round_fields(r)
            h = wire.Header(msg_type=lay.MsgType.DATA, job_id=net.job_id, slot=s, round=lo,
                            round_hi=hi, slot_set=r & 1, lane_bits=lay.INDEX_BITS, rank=0,
                            token=net.token, flags=int(lay.Flag.START),
                            elem_count=lay.COORDS_PER_PACKET)
            out.append(wire.pack_header(h) + bytes([0xFF]) * (lay.COORDS_PER_PACKET // 2))
    return out


def test_a_session_2_to_the_31_us_later_is_not_reopened_by_replays(net):
    """The band 32-bit rounds left (docs/protocol.md, "Sessions"): a session that starts 2^31
    µs (35.8 min) and a little after an earlier one (here 2^31 + 64) sees that session's first
    rounds as *newer* in 32 bits, so its replayed START packets reopened the copies. With
    48-bit rounds they are older: dropped STALE, and a session right after opens at its first
    candidate with exact sums."""
    codec = THCCodec()
    xs = worker_data(2, 2000, seed=6)
    want = simulated_allreduce(codec, xs, round=0).average
    s0, _, _ = _session(net, first_candidate(), xs)
    s1, got, _ = _session(net, s0 + (1 << 31) + 64, xs)
    assert s1 == s0 + (1 << 31) + 64 and all(torch.equal(g, want) for g in got)
    stale0 = _drops(net).get(int(lay.DropReason.STALE), 0)
    replay = _replays(net, s0)
    a = net.address(0)
    ep = UdpEndpoint(a.switch, bind=(a.ip, 0))
    try:
        ep.send_many(replay)
    finally:
        ep.close()
    s2, got, _ = _session(net, s1 + 4096, xs)
    assert s2 == s1 + 4096 and all(torch.equal(g, want) for g in got)
    assert _drops(net).get(int(lay.DropReason.STALE), 0) >= stale0 + len(replay)


def _drops(net: EmbeddedNetwork) -> dict[int, int]:
    from control_plane.controller import DROP_COUNTER

    return dict(net.status()[0].counters.get(DROP_COUNTER, {}))


@pytest.mark.parametrize(("field", "spec", "words"), [
    ("num_slots", {"num_slots": 8}, ["num_slots", "says 8", "gives the job 4"]),
    ("coords_per_packet", {"coords_per_packet": 512}, ["coords_per_packet", "says 512",
                                                       "takes 256"]),
    ("lane_bits", {"lane_bits": 16}, ["lane_bits", "says 16", "installed 8"]),
    ("token", {"token": 12345}, ["answered no status request", "token", mask_token(12345)]),
])
def test_check_names_the_field_and_both_values(net, field, spec, words):
    agg = _agg(net, 0, **spec)
    try:
        with pytest.raises(JobCheckError) as exc:
            check_job(agg, timeout=1.0)
    finally:
        agg.close(finish=False)
    msg = str(exc.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_check_passes_on_the_installed_job(net):
    agg = _agg(net, 1)
    try:
        got = check_job(agg, timeout=1.0)
    finally:
        agg.close(finish=False)
    assert (got.lane_bits, got.num_slots, got.coords_per_packet) == (8, 4, 256)
