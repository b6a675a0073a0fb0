"""Absent contributors (``docs/protocol.md``, "Absent contributors"; issue 16, H4).

Under the partial policy a dead rank costs every slot a DEADLINE round trip. The software
target learns it instead: after ``ABSENT_AFTER`` deadline releases in a row without a rank, it
holds the rank absent and releases a slot once every other rank has contributed, until the
rank is heard from again. Both the C fast path and the packet-by-packet reference, which must
agree on frames, registers and the presence rows.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from host.protocol.layout import MAX_WORKERS, Flag
from host.softswitch import pipeline as pl_mod
from host.softswitch.config import PRESENCE_ABSENT, PRESENCE_HEARD, PRESENCE_MASK, PRESENCE_MISS
from host.softswitch.controls.common import ABSENT_AFTER, R
from tests.support.softswitch import TABLE, Bench, C, Peer, data, worker

W = [worker(r) for r in range(3)]
INTRUDER = Peer(2, 9, "10.0.0.9", "02:00:00:00:00:09")
JOB = 30
LATE = int(Flag.RETX | Flag.DEADLINE)
PATHS = [pytest.param(False, id="reference"),
         pytest.param(True, id="c", marks=pytest.mark.skipif(
             pl_mod._fastpath is None, reason="the C fast path (_fastpath) is not built"))]


def _bench(native: bool, absent_silence: float = 0.0) -> Bench:
    x = Bench(pool_slots=8, absent_silence=absent_silence)
    x.job(JOB, W, num_slots=2)
    p = x.sw.pipeline
    p.native = p.fast = native
    return x


def _presence(x: Bench) -> list[int]:
    """Job 30's presence row without the clock columns."""
    return x.sw.pipeline.cfg.presence[0, :PRESENCE_HEARD].tolist()


def _fill(rank: int, rnd: int) -> np.ndarray:
    return np.full(C, (rank * 5 + rnd) % 16)


def _results(out) -> list[tuple[int, int]]:
    """(count, flags) of each emitted result."""
    return [(m.header.count, m.header.flags) for _p, (_d, _s, _t, m) in out]


def _partial_round(x: Bench, rnd: int) -> list:
    """Ranks 0 and 1 contribute to ``rnd``; rank 0 asks for the slot's sum (DEADLINE)."""
    assert x.send(data(W[0], JOB, 0, rnd, _fill(0, rnd)), data(W[1], JOB, 0, rnd, _fill(1, rnd))) == []
    return x.send(data(W[0], JOB, 0, rnd, _fill(0, rnd), flags=LATE))


@pytest.mark.parametrize("native", PATHS)
def test_a_rank_missed_absent_after_times_is_held_absent_until_heard_from(native):
    x = _bench(native)
    assert _presence(x)[PRESENCE_MASK] == 0b111
    for rnd in range(ABSENT_AFTER):
        assert _presence(x)[PRESENCE_ABSENT] == 0          # not yet: the slot waits
        assert _results(_partial_round(x, rnd)) == [(2, 0)] * 3
        assert _presence(x)[PRESENCE_MISS + 2] == rnd + 1
    assert _presence(x)[PRESENCE_ABSENT] == 0b100
    # rank 2 absent: the slot releases at ranks 0 and 1, without a DEADLINE
    rnd = ABSENT_AFTER
    out = x.send(data(W[0], JOB, 0, rnd, _fill(0, rnd)), data(W[1], JOB, 0, rnd, _fill(1, rnd)))
    assert _results(out) == [(2, 0)] * 3
    table = np.asarray(TABLE)
    np.testing.assert_array_equal(out[0][1][3].values,
                                  table[_fill(0, rnd)] + table[_fill(1, rnd)])
    # rank 2 comes back late for that round: answered with the stored sum, present again
    assert _results(x.send(data(W[2], JOB, 0, rnd, _fill(2, rnd)))) == [(2, int(Flag.RESENT))]
    # nothing of the streak is left (the numpy path's fast case needs a row without anything
    # to forget); the clock column says when rank 2 was heard from
    assert not x.sw.pipeline.cfg.presence[0, PRESENCE_ABSENT:PRESENCE_HEARD].any()
    assert x.sw.pipeline.cfg.presence[0, PRESENCE_HEARD + 2] > 0
    # the next round waits for it again, and includes it
    rnd += 1
    assert x.send(data(W[0], JOB, 0, rnd, _fill(0, rnd)), data(W[1], JOB, 0, rnd, _fill(1, rnd))) == []
    assert _results(x.send(data(W[2], JOB, 0, rnd, _fill(2, rnd)))) == [(3, 0)] * 3
    assert x.drops() == {}


@pytest.mark.parametrize("native", PATHS)
def test_misses_must_be_in_a_row(native):
    """A contribution of the rank between deadline releases starts its count afresh."""
    x = _bench(native)
    rnd = 0
    for _ in range(2):
        for _ in range(ABSENT_AFTER - 1):
            _partial_round(x, rnd)
            rnd += 1
        assert _presence(x)[PRESENCE_MISS + 2] == ABSENT_AFTER - 1
        for r in range(3):                                  # a full round with rank 2
            out = x.send(data(W[r], JOB, 0, rnd, _fill(r, rnd)))
        assert _results(out) == [(3, 0)] * 3
        assert _presence(x)[PRESENCE_MISS + 2] == 0
        rnd += 1
    assert _presence(x)[PRESENCE_ABSENT] == 0
    assert x.send(data(W[0], JOB, 0, rnd, _fill(0, rnd)), data(W[1], JOB, 0, rnd, _fill(1, rnd))) == []


def test_both_paths_agree_and_the_c_path_keeps_the_batches():
    """The same rounds through the C path (one batch each) and the reference: the same frames,
    registers, sums and presence rows."""
    if pl_mod._fastpath is None:
        pytest.skip("the C fast path (_fastpath) is not built")
    batches = []
    for rnd in range(ABSENT_AFTER + 3):
        batches.append([data(W[0], JOB, rnd % 2, rnd, _fill(0, rnd)),
                        data(W[1], JOB, rnd % 2, rnd, _fill(1, rnd))])
        batches.append([data(W[1], JOB, rnd % 2, rnd, _fill(1, rnd), flags=LATE)])
    batches.append([data(W[2], JOB, 1, ABSENT_AFTER + 2, _fill(2, 0))])      # back
    batches.append([data(W[r], JOB, 0, ABSENT_AFTER + 3, _fill(r, 1)) for r in range(3)])

    def run(native: bool):
        x = _bench(native)
        p = x.sw.pipeline
        out = [x.sw.process_frames(b) for b in batches]
        return out, p.state(), p.sums.tobytes(), _presence(x), dict(p.outcomes), p.native_batches

    got, want = run(True), run(False)
    assert got[0] == want[0] and got[2:5] == want[2:5]
    assert all((got[1][k] == want[1][k]).all() for k in want[1])
    assert got[5] == len(batches)                            # every batch stayed in C
    assert want[3][PRESENCE_ABSENT] == 0
    # after ABSENT_AFTER releases the DEADLINE batches find their slot released already
    assert want[4]["release"] == ABSENT_AFTER and want[4]["resent"] >= 3


@pytest.mark.parametrize("native", PATHS)
def test_a_non_member_cannot_make_a_rank_absent(native):
    """DEADLINE requests from an address that is not the job's sender are dropped before the
    slots (BAD_SENDER): they release nothing and count no miss."""
    x = _bench(native)
    for rnd in range(2 * ABSENT_AFTER):
        x.send(data(W[0], JOB, 0, rnd, _fill(0, rnd)), data(W[1], JOB, 0, rnd, _fill(1, rnd)))
        assert x.send(data(INTRUDER, JOB, 0, rnd, _fill(2, rnd), flags=LATE)) == []
        x.send(data(W[2], JOB, 0, rnd, _fill(2, rnd)))
    assert x.drops() == {int(R.BAD_SENDER): 2 * ABSENT_AFTER}
    assert _presence(x)[PRESENCE_ABSENT:] == [0] * (len(_presence(x)) - PRESENCE_ABSENT)


def test_a_controller_write_starts_presence_afresh():
    x = _bench(False)
    for rnd in range(ABSENT_AFTER):
        _partial_round(x, rnd)
    assert _presence(x)[PRESENCE_ABSENT] == 0b100
    x.job(31, W, num_slots=2, slot_base=2, index=1)
    assert _presence(x)[PRESENCE_ABSENT] == 0


@pytest.mark.parametrize("native", PATHS)
def test_a_rank_is_held_absent_only_after_its_silence(native):
    """Misses in a quick burst (a worker starting late, a slower step) make no rank absent: the
    first miss must be ``absent_silence`` old."""
    x = _bench(native, absent_silence=3600.0)
    for rnd in range(2 * ABSENT_AFTER):
        _partial_round(x, rnd)
    assert _presence(x)[PRESENCE_MISS + 2] == 2 * ABSENT_AFTER
    assert _presence(x)[PRESENCE_ABSENT] == 0
    rnd = 2 * ABSENT_AFTER
    assert x.send(data(W[0], JOB, 0, rnd, _fill(0, rnd)), data(W[1], JOB, 0, rnd, _fill(1, rnd))) == []


@pytest.mark.parametrize("native", PATHS)
def test_the_silence_is_counted_from_when_the_rank_was_last_heard(native):
    """A rank already silent for longer than ``absent_silence`` (never heard since its job was
    installed, or since its last contribution) is held absent at its ``ABSENT_AFTER``-th miss,
    with no further silence after the first miss: a dead rank's first deadline release comes a
    whole deadline after its silence began (before, the silence was counted from the first
    miss, and the next exchange of a fast job ran at the old pace while the switch learned)."""
    x = _bench(native, absent_silence=0.2)
    time.sleep(0.25)                        # rank 2 silent since the job was installed
    for rnd in range(ABSENT_AFTER):
        assert _presence(x)[PRESENCE_ABSENT] == 0
        _partial_round(x, rnd)
    assert _presence(x)[PRESENCE_ABSENT] == 0b100
    # heard from again: silent for less than the silence, so its misses do not make it absent
    rnd = ABSENT_AFTER
    assert _results(x.send(data(W[2], JOB, 0, rnd, _fill(2, rnd)))) == []
    assert _presence(x)[PRESENCE_ABSENT] == 0
    x.send(data(W[0], JOB, 0, rnd, _fill(0, rnd)), data(W[1], JOB, 0, rnd, _fill(1, rnd)))
    for rnd in range(ABSENT_AFTER + 1, 3 * ABSENT_AFTER):
        _partial_round(x, rnd)
    assert _presence(x)[PRESENCE_MISS + 2] == 2 * ABSENT_AFTER - 1
    assert _presence(x)[PRESENCE_ABSENT] == 0
    time.sleep(0.25)
    _partial_round(x, 3 * ABSENT_AFTER)     # silent long enough now
    assert _presence(x)[PRESENCE_ABSENT] == 0b100


@pytest.mark.parametrize("native", PATHS)
def test_a_new_session_forgets_who_was_absent(native):
    """A first transmission opening a slot copy for a session (START, not RETX) forgets who was
    absent, so a rank absent in the last session that just starts later in this one is waited
    for; its miss streak stays, so one deadline release of the new session without it holds it
    absent again."""
    x = _bench(native)
    for rnd in range(ABSENT_AFTER):
        _partial_round(x, rnd)
    assert _presence(x)[PRESENCE_ABSENT] == 0b100
    rnd, start = 1 << 20, int(Flag.START)
    assert x.send(data(W[0], JOB, 1, rnd, _fill(0, rnd), flags=start),
                  data(W[1], JOB, 1, rnd, _fill(1, rnd), flags=start)) == []
    assert _presence(x)[PRESENCE_ABSENT] == 0
    assert _presence(x)[PRESENCE_MISS + 2] == ABSENT_AFTER
    # rank 2 is dead in this session too: the round is released by DEADLINE (RETX: no reset)
    out = x.send(data(W[0], JOB, 1, rnd, _fill(0, rnd), flags=start | LATE))
    assert _results(out) == [(2, 0)] * 3
    assert _presence(x)[PRESENCE_ABSENT] == 0b100
    rnd += 1
    out = x.send(data(W[0], JOB, 0, rnd, _fill(0, rnd), flags=start),
                 data(W[1], JOB, 0, rnd, _fill(1, rnd), flags=start))
    assert out == []                       # START again: waits for rank 2 once more
    assert _results(x.send(data(W[2], JOB, 0, rnd, _fill(2, rnd), flags=start))) == [(3, 0)] * 3
    assert _presence(x)[PRESENCE_ABSENT:] == [0] * (PRESENCE_HEARD - PRESENCE_ABSENT)


@pytest.mark.parametrize("native", PATHS)
def test_contributions_are_counted_per_rank(native):
    """``ingress.thc_slot.rank_contributions`` (index = job index * MAX_WORKERS + rank) counts
    every contribution added, as the v1model program does: what the controller's watch reads to
    learn a rank that stays dead (control_plane/watch.py). Retransmissions, ``DEADLINE``
    requests and late ranks answered from the stored result add nothing."""
    x = _bench(native)
    for rnd in range(3):
        _partial_round(x, rnd)                 # ranks 0 and 1; rank 0 asks (no add)
    rnd = 3
    x.send(*(data(W[r], JOB, 0, rnd, _fill(r, rnd)) for r in range(3)))
    x.send(data(W[2], JOB, 0, rnd, _fill(2, rnd), flags=int(Flag.RETX)))   # answered, not added
    row = x.counter("rank_contributions")[: MAX_WORKERS]
    assert row[:3].tolist() == [4, 4, 1]
    assert not row[3:].any()
    assert int(x.counter("contributions")[0]) == 9
