"""Before a worker's first step: check the job with its switch, then open a session.

**The start-up check** (:func:`check_job`) asks the switch about the job with status
requests (``PEEK``, docs/protocol.md: answered to the sender only, no state changes, never
more bytes than asked for a norm slot) and compares what comes back with the worker's job:

* a norm-slot ``PEEK`` on every slot of the worker's window: answered only if the job is
  installed, the token is the job's and this rank sends from its member's address; the
  slots that go unanswered while slot 0 is answered are beyond the job's range at the switch
  (``num_slots``, both values named);
* a data ``PEEK`` at the worker's packet width, and at the other widths when that one goes
  unanswered (``coords_per_packet``, both values named); its answer carries the job's result
  lane width (``lane_bits``, both values named).

A switch drops a request with a wrong token like any other packet with one, without an answer
(a token must not be confirmable by asking), so "no answer at all" names every cause it can
be, with the values used.

**The session** (:func:`open_session`). A switch keeps each slot copy's last round and drops a
contribution whose round is older (``STALE``); a new session must start above every round the
job's copies hold, which a worker cannot read. Rounds are 48-bit serial numbers
(:data:`~host.protocol.layout.ROUND_BITS`: the header's ``round`` and ``round_hi``). The ranks
agree on a candidate round base (the clock in µs mod 2⁴⁸, even) and run one exchange of zeros
through every copy, data and norm, with ``START``: a copy that holds an older round opens at
the candidate; one that holds a newer round (a rank 0 whose clock was ahead, or a copy pushed
ahead by a member) drops it and the exchange gives up (a third of the job's give-up time, 1 to
5 s). The ranks then move the candidate on (:func:`candidate`: 2³⁰, then about 2⁴⁶ a try) and
run the exchange again: after at most four candidates every copy of the job is at the
candidate, and the session's own rounds start two above it. Zeros add nothing (index 0 is
table value 0). So every session starts ahead of every round an earlier session used, and a
packet of an earlier session — retransmitted late or replayed — is older than the copy it
meets for 2⁴⁷ µs (4.46 years) of clock after that session, not 2³¹ µs (35.8 min) as with
32-bit rounds (docs/protocol.md, "Sessions").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from host.protocol import codec as wire
from host.protocol.layout import (
    INDEX_BITS,
    NORMS,
    NORMS_PER_PACKET,
    PACKET_WIDTHS,
    ROUND_BITS,
    ROUND_MASK,
    THC_HEADER,
    THC_HEADER_BYTES,
    VALUE_BITS,
    Flag,
    MsgType,
)
from host.transport.job import NetworkAggregator, session_round_base
from host.transport.jobfile import mask_token
from host.transport.slots import SlotConfig, SlotTimeoutError

log = logging.getLogger(__name__)

__all__ = [
    "EPOCH_STEP",
    "ROUND_STEP",
    "JobCheck",
    "JobCheckError",
    "candidate",
    "check_job",
    "first_candidate",
    "open_session",
    "start_session",
]

_IDX = {f.name: i for i, f in enumerate(THC_HEADER)}
#: How far the second session candidate moves past the first when the first was older than
#: some copy: a quarter of the 32-bit round space, enough for a clock 17.9 min behind the
#: clock of an earlier session (another rank 0). Its low 32 bits are the moves a switch that
#: compares 32-bit rounds only (the TNA program) sees.
ROUND_STEP = 1 << 30
#: How far every later candidate moves: a quarter of the 48-bit round space (copies pushed up
#: to 2^47 rounds ahead of the clock, e.g. by a member's far-ahead START), plus ROUND_STEP so
#: that its low 32 bits move on as ROUND_STEP does.
EPOCH_STEP = (1 << (ROUND_BITS - 2)) + ROUND_STEP


def candidate(first: int, attempt: int) -> int:
    """The session's round base candidate of try ``attempt`` (0, 1, ...): ``first``, then
    ``first + ROUND_STEP``, then ``EPOCH_STEP`` further each (48-bit rounds, never 0).

    After at most four candidates every copy of the job is at the candidate: a copy holding a
    round d ahead of the second (0 < d < 2^47) is behind the third when d < EPOCH_STEP and
    behind the fourth otherwise, by less than 2^47 in both cases; a copy that took a candidate
    is ROUND_STEP or EPOCH_STEP behind the next. Seen in 32 bits, the moves are 2^30 each, as
    a 32-bit switch needs (at most three candidates there)."""
    move = 0 if attempt == 0 else ROUND_STEP + (attempt - 1) * EPOCH_STEP
    return ((first + move) & ROUND_MASK) or 2


class JobCheckError(RuntimeError):
    """The switch does not serve this worker's job as its job file says: one line naming the
    field and both values, or every reason the switch may have had for not answering."""


@dataclass(frozen=True)
class JobCheck:
    """What the switch showed of the job (:func:`check_job`)."""

    seconds: float
    lane_bits: int
    num_slots: int
    coords_per_packet: int


def _switch_name(agg: NetworkAggregator) -> str:
    sw = getattr(agg.ep, "switch", None)
    return f"{sw[0]}:{sw[1]}" if isinstance(sw, tuple) else "the switch"


def _peek(agg: NetworkAggregator, kind: str, slot: int, width: int) -> bytes:
    """A status request for ``slot``: a norm packet, or a data packet ``width`` wide."""
    spec = agg.spec
    hdr = [0] * len(_IDX)
    hdr[_IDX["version"]] = wire.THC_VERSION
    hdr[_IDX["job_id"]] = spec.job_id
    hdr[_IDX["rank"]] = spec.rank
    hdr[_IDX["token"]] = spec.token
    hdr[_IDX["slot"]] = slot
    hdr[_IDX["round"]] = 1
    hdr[_IDX["slot_set"]] = 1
    hdr[_IDX["flags"]] = int(Flag.PEEK)
    if kind == "norm":
        hdr[_IDX["msg_type"]] = int(MsgType.NORM)
        hdr[_IDX["lane_bits"]] = NORMS.bits
        hdr[_IDX["elem_count"]] = NORMS_PER_PACKET
        body = NORMS.nbytes
    else:
        bits = VALUE_BITS if spec.uplink == "values" else INDEX_BITS
        hdr[_IDX["msg_type"]] = int(MsgType.DATA)
        hdr[_IDX["lane_bits"]] = bits
        hdr[_IDX["elem_count"]] = width
        body = width * bits // 8
    return wire.HEADER_STRUCT.pack(*hdr) + bytes(body)


def check_job(agg: NetworkAggregator, timeout: float = 2.0) -> JobCheck:
    """Check the job with the switch before the first step (see the module docstring).

    Parameters
    ----------
    agg : NetworkAggregator
        The rank's aggregator (its endpoint is used; its slot window is not touched).
    timeout : float
        Seconds to wait for the answers (the check never takes longer).

    Raises
    ------
    JobCheckError
        One line naming what differs (``num_slots``, ``coords_per_packet``, ``lane_bits``, with
        the job file's and the switch's values) or, with no answer at all, every cause.
    """
    spec = agg.spec
    t0 = time.monotonic()
    W = spec.coords_per_packet
    queries: dict[tuple[str, int, int], bytes] = {}
    for s in range(spec.num_slots):
        queries[("norm", s, 0)] = _peek(agg, "norm", s, 0)
    for w in (W, *(x for x in PACKET_WIDTHS if x != W)):
        queries[("data", 0, w)] = _peek(agg, "data", 0, w)
    answers: dict[tuple[str, int, int], tuple] = {}
    settle = float("inf")
    h_type, h_slot, h_flags = _IDX["msg_type"], _IDX["slot"], _IDX["flags"]
    h_token, h_job, h_lane = _IDX["token"], _IDX["job_id"], _IDX["lane_bits"]
    deadline = t0 + timeout
    resend = t0
    while time.monotonic() < deadline:
        now = time.monotonic()
        if now >= resend:
            missing = [q for k, q in queries.items() if k not in answers]
            agg.ep.send_many(missing)
            resend = now + min(0.1, timeout / 8)
        if answers and deadline > settle:
            # the switch answers: what it has not answered after a few more tries (one
            # round trip and three resends) it is not going to
            deadline = settle
        for dg in agg.ep.recv_many(min(0.05, max(0.0, deadline - now))):
            if len(dg) < THC_HEADER_BYTES:
                continue
            h = wire.HEADER_STRUCT.unpack_from(dg)
            if not h[h_flags] & Flag.PEEK or h[h_job] != spec.job_id or h[h_token] != spec.token:
                continue
            if not answers:
                settle = time.monotonic() + max(0.3, 4 * (time.monotonic() - t0))
            if h[h_type] == MsgType.NORM_RESULT:
                answers[("norm", h[h_slot], 0)] = h
            elif h[h_type] == MsgType.RESULT:
                # the answer's payload is as wide as the request's width in lanes
                lanes = (len(dg) - THC_HEADER_BYTES) * 8 // max(1, h[h_lane])
                width = next((x for x in PACKET_WIDTHS if x == lanes), W)
                answers[("data", h[h_slot], width)] = h
        if ("data", 0, W) in answers and all(("norm", s, 0) in answers
                                             for s in range(spec.num_slots)):
            break
    seconds = time.monotonic() - t0
    sw = _switch_name(agg)
    who = f"job {spec.job_id} rank {spec.rank}"
    if not answers:
        raise JobCheckError(
            f"{who}: {sw} answered no status request in {timeout:g} s: the job is not "
            f"installed there (netco controller apply), its token is not this job file's "
            f"({mask_token(spec.token)}; `netco controller show` prints the installed one's), "
            f"this rank does not send from its member's address, or the switch is down")
    slots = [s for s in range(spec.num_slots) if ("norm", s, 0) in answers]
    if ("norm", 0, 0) in answers and len(slots) < spec.num_slots:
        have = max(s for s in slots) + 1 if slots else 0
        raise JobCheckError(
            f"{who}: num_slots: the job file says {spec.num_slots}, {sw} gives the job "
            f"{have}; write the job file again from the controller's file "
            f"(netco controller job) or give the job num_slots: {spec.num_slots} there")
    if ("data", 0, W) not in answers:
        other = [w for (k, _s, w) in answers if k == "data" and w != W]
        theirs = str(other[0]) if other else "another"
        raise JobCheckError(
            f"{who}: coords_per_packet: the job file says {W}, {sw} takes {theirs}; give the "
            f"switch's width to the workers (its --coords-per-packet, the controller file's "
            f"coords_per_packet)")
    lane = answers[("data", 0, W)][h_lane]
    if lane != spec.lane_bits:
        raise JobCheckError(
            f"{who}: lane_bits: the job file says {spec.lane_bits}, {sw} installed {lane} for the "
            f"job; write the job file again (netco controller job)")
    return JobCheck(seconds, lane, spec.num_slots, W)


def first_candidate(now_us: int | None = None) -> int:
    """The first round-base candidate of a session: the clock's round base
    (:func:`host.transport.job.session_round_base`, µs mod 2⁴⁸) made even, never 0."""
    return (session_round_base(now_us) & ~1) or 2


def open_session(agg: NetworkAggregator, base: int, slots: SlotConfig,
                 give_up: float = 1.0) -> bool:
    """Try ``base`` as the session's round base: one exchange of zeros through every data
    and norm slot copy of the job (every rank must call it with the same ``base``).

    On success the aggregator's window continues two rounds above ``base`` with ``slots``
    (the job's timing and policy) and True is returned; False when some copy did not answer
    within ``give_up`` seconds (it holds a newer round, or a rank did not take part), leaving
    the window to the next candidate.
    """
    spec = agg.spec
    agg.new_window(base, SlotConfig(rto=slots.rto, max_rto=slots.max_rto, give_up=give_up,
                                    policy="exact", peek_wait=min(0.2, give_up / 4)))
    n = 2 * spec.num_slots
    W = spec.coords_per_packet
    values = spec.uplink == "values"
    bits = VALUE_BITS if values else INDEX_BITS
    win = agg.window
    try:
        norm_out = np.zeros(n * NORMS_PER_PACKET, dtype=np.uint32)
        win.exchange_into("norm", MsgType.NORM, NORMS.bits,
                          np.zeros(n * NORMS.nbytes, dtype=np.uint8),
                          np.full(n, NORMS_PER_PACKET), np.zeros(n, dtype=np.int64),
                          MsgType.NORM_RESULT, norm_out, 4)
        data_out = np.zeros(n * W, dtype=spec.sums_dtype)
        win.exchange_into("data", MsgType.DATA, bits, np.zeros(n * W * bits // 8, dtype=np.uint8),
                          np.full(n, W), np.zeros(n, dtype=np.int64), MsgType.RESULT, data_out,
                          spec.lane_bits // 8)
    except SlotTimeoutError as exc:
        log.info("job %d rank %d: session candidate %d not taken (%s)", spec.job_id, spec.rank,
                 base, exc)
        return False
    win.cfg = slots
    return True


class ThreadAgreement:
    """``others_failed`` of :func:`start_session` for ranks that are threads of one process
    (tests, benchmarks): every rank's call waits for all ``n`` (``timeout`` seconds at most)
    and returns whether any rank's try failed; then it is ready for the next try."""

    def __init__(self, n: int, timeout: float = 30.0) -> None:
        self.barrier = threading.Barrier(n)
        self.lock = threading.Lock()
        self.failed = False
        self.timeout = timeout

    def __call__(self, ok: bool) -> bool:
        with self.lock:
            self.failed |= not ok
        self.barrier.wait(self.timeout)
        failed = self.failed
        self.barrier.wait(self.timeout)
        with self.lock:
            self.failed = False
        self.barrier.wait(self.timeout)
        return failed


#: Candidates :func:`start_session` tries (four always suffice, :func:`candidate`; one more
#: for a rank that was slow to start the first exchange).
SESSION_TRIES = 5


def start_session(agg: NetworkAggregator, first: int, slots: SlotConfig,
                  others_failed: Callable[[bool], bool], give_up: float | None = None) -> int:
    """Open the session: try the candidates of ``first`` (:func:`candidate`) until every
    rank's exchange went through (see the module docstring). Every rank calls it with the same
    ``first``.

    Parameters
    ----------
    others_failed : callable
        Takes this rank's outcome of a try and returns whether any rank's failed (the
        agreement between ranks: an all-reduce over the process group, a barrier in tests).
    give_up : float, optional
        Seconds a try waits for a copy's answer (default: a third of the job's ``give_up``,
        1..5 s: a slow target, BMv2, needs more than the software target's milliseconds).

    Returns
    -------
    int
        The session's round base candidate (the session's rounds start two above it).

    Raises
    ------
    JobCheckError
        No candidate went through in :data:`SESSION_TRIES` tries.
    """
    if give_up is None:
        give_up = min(max(1.0, slots.give_up / 3), 5.0)
    for attempt in range(SESSION_TRIES):
        cand = candidate(first, attempt)
        ok = open_session(agg, cand, slots, give_up)
        if not others_failed(ok):
            return cand
    spec = agg.spec
    raise JobCheckError(
        f"job {spec.job_id} rank {spec.rank}: no session opened in {SESSION_TRIES} tries: an "
        f"exchange of zeros through the job's slots got no answer on some rank (is every rank "
        f"running? the switch's drops: netco controller status)")
