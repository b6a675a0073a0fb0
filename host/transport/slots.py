"""The reliable, self-clocked slot window (SwitchML-style; ``docs/protocol.md``).

A job owns ``num_slots`` switch slots. An exchange sends a list of packets: packet ``i`` travels
on slot ``i % num_slots``; a worker keeps one packet in flight per slot and sends the slot's
next packet only once the current one's result arrived. Every worker runs the same sequence, so
the ``(slot, round)`` of a packet is the same everywhere: each slot counts its own rounds, and
``slot_set = round & 1`` picks the switch's copy, so a late retransmission can never mix rounds.

Reliability: a packet without a result after the retransmission timeout is sent again (flag
RETX, doubling the timeout up to ``max_rto``). The timeout adapts to the measured round trip
like TCP's (Jacobson/Karels, RFC 6298: ``srtt + 4·rttvar``, samples only from packets sent
once), never below ``rto``; the switch answers a retransmission for a completed slot with the
stored result and never counts a contributor twice (bitmap). Results for packets that are not
outstanding (duplicates, stale rounds) are ignored and counted.

Policies: ``exact`` retransmits until every contribution is in and raises
:class:`SlotTimeoutError` after ``give_up`` seconds of silence on a slot, naming the ranks the
switch reports missing; ``partial`` asks the switch, ``deadline`` seconds after a packet was
first sent, to release the slot's current sum (flag DEADLINE) and accepts it with its count m,
and raises the same error when even that gets no answer for ``give_up`` more seconds (the
switch is gone).

:meth:`SlotWindow.exchange_into` runs a whole exchange in C (``_slotloop.c``, the same loop
with the same semantics, without a Python call per packet) when the extension is built and the
endpoint exposes its socket (:class:`~host.transport.ports.UdpEndpoint`,
:class:`~host.transport.ports.RawEndpoint`); otherwise, and with ``NETCO_TRANSPORT_C=0``, it
runs :meth:`SlotWindow.exchange`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from heapq import heappop, heappush

import numpy as np

from host.busywait import SPIN_US
from host.protocol import codec as wire
from host.protocol.framing import MAX_DATAGRAM
from host.protocol.generated_dataplane import LAYOUT_HASH
from host.protocol.layout import (
    ROUND_MASK,
    THC_HEADER,
    THC_HEADER_BYTES,
    Flag,
    MsgType,
    round_fields,
)
from host.transport.ports import Endpoint

try:
    from host.transport import _slotloop
except ImportError:  # built without a C compiler: the Python loop
    _slotloop = None

log = logging.getLogger(__name__)

#: Whether :meth:`SlotWindow.exchange_into` may use the C loop (extension built and not
#: switched off with ``NETCO_TRANSPORT_C=0``).
NATIVE = _slotloop is not None and os.environ.get("NETCO_TRANSPORT_C", "1") != "0"
if NATIVE and getattr(_slotloop, "LAYOUT_HASH", None) != LAYOUT_HASH:
    # Built against another host/protocol/netco_layout.h (offsets, flag bits): never run it.
    raise ImportError(f"host/transport/_slotloop was built against another frame layout "
                      f"({getattr(_slotloop, 'LAYOUT_HASH', None)} != {LAYOUT_HASH}): rebuild it "
                      f"with `.venv/bin/pip install -e .` (or set NETCO_TRANSPORT_C=0)")

_FIELDS = [f.name for f in THC_HEADER]
_IDX = {name: i for i, name in enumerate(_FIELDS)}
_HEADER = wire.HEADER_STRUCT
# Plain ints: IntFlag arithmetic costs an enum call per packet.
_RETX, _DEADLINE, _PEEK = int(Flag.RETX), int(Flag.DEADLINE), int(Flag.PEEK)
_START = int(Flag.START)
#: The shortest wait before a slot's DEADLINE request while ranks are suspected dead (s): the
#: wait follows the smoothed RTT, this only keeps it from collapsing to nothing (issue 16, H4).
FAST_FLOOR = 50e-6
#: The largest factor :attr:`SlotWindow.gain` puts on the smoothed RTT (``_slotloop.c``'s).
GAIN_MAX = 16.0
#: What each partial result without a late rank takes off the gain, per slot of the window
#: (``gain *= 1 - GAIN_EASE / window``: about x0.88 per round of the window; ``_slotloop.c``'s).
GAIN_EASE = 0.125
#: A rank that no result of the current exchange had in yet grows the gain only after this many
#: fast waits (:meth:`SlotWindow._fast_deadline`) since the exchange began or the gain last
#: doubled, whichever is later: the workers' exchanges start at different times, and a worker
#: that has not started yet is not late by a bit; doubling the wait for it each round trip
#: left the gain at ``GAIN_MAX`` for the rest of the exchange (``_slotloop.c``'s). Issue 16, H4.
ABSENT_WAITS = 8.0


def _field_spec() -> tuple[int, ...]:
    """(offset, width) of the header fields the C loop writes and reads, flattened, in the
    order of ``_slotloop.c``'s enum."""
    where, off = {}, 0
    for f in THC_HEADER:
        where[f.name] = (off, f.bits // 8)
        off += f.bits // 8
    names = ("slot", "round", "slot_set", "elem_count", "chunk_offset", "flags", "msg_type",
             "job_id", "count", "bitmap", "lane_bits", "rank", "token", "round_hi")
    return tuple(v for n in names for v in where[n])


_C_FIELDS = _field_spec()
_FLAGS_AT = _C_FIELDS[2 * 5]   # byte offset of ``flags`` in the header


class SlotTimeoutError(TimeoutError):
    """A slot got no result in time; the message names the job, slot, round and missing ranks."""

    def __init__(self, message: str, missing: list[int] | None = None) -> None:
        super().__init__(message)
        self.missing = missing


class LaneMismatchError(RuntimeError):
    """The switch answers with lanes of another width than the worker was told
    (``JobSpec.lane_bits`` against the job's ``lane_bits`` at the switch): decoding them would
    give garbage sums, so the exchange stops (issue 16, S2)."""


def _lane_mismatch(job_id: int, got: int, want: int) -> LaneMismatchError:
    return LaneMismatchError(
        f"job {job_id}: the switch sends {got}-bit result lanes but this worker expects {want} "
        f"(JobSpec.lane_bits); give the workers the job's lane_bits from the controller file")


@dataclass
class SlotConfig:
    """Timing and policy of the slot window.

    Parameters
    ----------
    rto : float
        Initial and minimum retransmission timeout (s); adapts to the round trip, doubles per
        retry, up to ``max_rto``.
    give_up : float
        Seconds without a result on one slot before :class:`SlotTimeoutError` (``partial``:
        after the ``deadline``: a switch that is there answers the DEADLINE request at once).
    deadline : float
        ``partial``: seconds after a packet's first send before asking for the partial sum.
    policy : {"exact", "partial"}
    peek_wait : float
        ``exact``, on giving up: seconds to wait for the switch's answer to the status request
        that names the missing ranks (at most ``2 * max_rto``); a worker raises at most
        ``give_up + peek_wait`` after a packet's first send.
    suspect_wait : float, optional
        ``partial``, while a rank is missing from the last partial result: seconds after a
        packet's first send before asking for the sum (None: the smoothed RTT times
        :attr:`SlotWindow.gain`, which doubles whenever a live worker turns out late, at least
        ``FAST_FLOOR``; twice that for all but the lowest live rank). A live worker later than
        that is left out of that packet's sum (unbiased: its count says so); a longer wait
        trades throughput for fewer such cases.
    """

    rto: float = 0.02
    max_rto: float = 0.5
    give_up: float = 10.0
    deadline: float = 0.5
    policy: str = "exact"
    suspect_wait: float | None = None
    peek_wait: float = 1.0

    def __post_init__(self) -> None:
        if self.policy not in ("exact", "partial"):
            raise ValueError(f"policy={self.policy!r}: choose 'exact' or 'partial'")
        if self.rto <= 0 or self.max_rto < self.rto:
            raise ValueError("need 0 < rto <= max_rto")
        if not self.give_up > 0 or not self.peek_wait >= 0:
            raise ValueError(f"give_up={self.give_up}, peek_wait={self.peek_wait}: need "
                             "give_up > 0 and peek_wait >= 0")
        if self.suspect_wait is not None and not self.suspect_wait > 0:
            raise ValueError(f"suspect_wait={self.suspect_wait}: must be > 0 (or None)")


@dataclass
class ExchangeStats:
    """Counters of one or more exchanges."""

    packets: int = 0
    retransmits: int = 0
    deadlines: int = 0
    #: of those, asked after the short wait while a rank was suspected dead (H4)
    fast_deadlines: int = 0
    stray_results: int = 0
    #: datagrams that did not come from the switch (another address or port): dropped
    foreign_results: int = 0
    partial_results: int = 0
    #: stored last-answered packets re-sent for workers behind after a switch restart (H3)
    repairs: int = 0
    min_count: int | None = None
    seconds: float = 0.0
    missing_ranks: set[int] = field(default_factory=set)

    def as_dict(self) -> dict[str, object]:
        d = dict(self.__dict__)
        d["missing_ranks"] = sorted(self.missing_ranks)
        return d


#: Called with (packet index, header tuple, datagram) for each accepted result.
ResultHandler = Callable[[int, tuple, memoryview], None]


class SlotWindow:
    """Runs exchanges of one worker of one job over an :class:`Endpoint`.

    Parameters
    ----------
    endpoint : Endpoint
    job_id, rank, world : int
        Job id, this worker's rank, number of workers (for the missing-rank report).
    num_slots : int
        The job's slots at the switch (the window).
    config : SlotConfig
    """

    def __init__(self, endpoint: Endpoint, job_id: int, rank: int, world: int, num_slots: int,
                 config: SlotConfig | None = None, round_base: int = 1, token: int = 0) -> None:
        if num_slots < 1:
            raise ValueError("num_slots must be >= 1")
        self.ep = endpoint
        self.job_id = job_id
        self.rank = rank
        self.world = world
        self.num_slots = num_slots
        self.cfg = config or SlotConfig()
        #: the job's token (``set_job.token``): carried by every packet; a result with another
        #: is forged and dropped (counted in ``foreign_results``). Issue 16.
        self.token = token & 0xFFFFFFFF
        #: rounds ``round_base`` and ``round_base + 1`` of each slot carry ``Flag.START`` (a
        #: new session may start far ahead of the switch's copies; other rounds may not).
        self.round_base = round_base & ROUND_MASK
        # Next round per slot, separately for data and norm state (they are distinct at the
        # switch). All workers start at the same ``round_base`` and advance identically.
        self.next_round = {"data": np.full(num_slots, round_base, dtype=np.int64),
                           "norm": np.full(num_slots, round_base, dtype=np.int64)}
        self.stats = ExchangeStats()
        self.srtt: float | None = None
        self.rttvar = 0.0
        #: Exponential backoff kept across packets until a valid RTT sample (RFC 6298, 5.5):
        #: under overload nearly every packet is retransmitted, Karn's rule then yields no
        #: samples, and without it every new packet would start from the stale, short timeout.
        self.backoff = 1.0
        #: Ranks missing from the last partial result (bitmap; ``partial`` policy). While any
        #: is, a packet asks for its slot's sum after :meth:`_fast_deadline` (about one RTT)
        #: instead of the full ``deadline``: a dead rank costs one deadline, not one per
        #: packet; a result with every rank clears it (the re-probe). Issue 16, H4.
        self.suspects = 0
        #: The fast wait's factor on the smoothed RTT (:meth:`_fast_deadline`): doubled (up to
        #: ``GAIN_MAX``) when a result leaves out a rank not in :attr:`dead` (a live worker was
        #: later than the wait), at most once per round trip (only results of packets first
        #: sent after the last doubling, at ``gain_t``, count); every other partial result while
        #: ranks are suspected eases it back by ``GAIN_EASE/window`` (about x0.88 per round of
        #: the window), never below 1; back to 1 when a slow result changes :attr:`dead`. A
        #: rank missing from every result of the exchange so far has not started it yet (or is
        #: dead): it grows the gain only after ``ABSENT_WAITS`` fast waits. Issue 16, H4.
        self.gain = 1.0
        self.gain_t = 0.0
        #: Other ranks missing from the last result that came ``deadline/2`` or more after its
        #: packet (bitmap), or late again while ``gain`` was ``GAIN_MAX`` already: they had
        #: time to answer, so they are taken for dead, until a result has them in; another rank
        #: missing from a faster result and not in here was late (``gain`` grows). Never this
        #: worker's own rank.
        self.dead = 0
        #: The last partial result came without a retransmission or DEADLINE request of this
        #: worker: the switch releases without the suspects itself (a target that holds them
        #: absent, docs/protocol.md "Absent contributors"), so the fast wait is an RTO
        #: (srtt + 4·rttvar), not one smoothed RTT: asking earlier would only cut live ranks out.
        self.self_release = False
        #: Per kind, each slot's last answered packet as a RETX datagram (rows of
        #: ``MAX_DATAGRAM`` bytes, lengths; 0: none). When a slot has waited two
        #: retransmissions, all of them are sent again (at most once per ``max_rto``): after a
        #: switch restart lost the stored results, workers still waiting for an older round of a
        #: slot get it completed by the contributions of those who had already moved on; a
        #: switch that still holds the round answers with a RESENT result (ignored) or drops a
        #: duplicate. Issue 16, H3 (docs/transport.md, "Switch restarts").
        self.repair = {k: (np.zeros((num_slots, MAX_DATAGRAM), dtype=np.uint8),
                           np.zeros(num_slots, dtype=np.int32)) for k in ("data", "norm")}
        self.next_repair = 0.0
        #: Wall-clock time (``time.time()``) of the last exchange the switch completed: the
        #: last contact a give-up names (None: none yet).
        self.last_contact: float | None = None
        #: Run :meth:`exchange_into` in C where possible (tests switch it off to compare).
        self.native = NATIVE
        #: Whether the last :meth:`exchange_into` ran in C.
        self.last_native = False

    def _fast_deadline(self) -> float:
        """Wait before asking for a slot's sum while ranks are suspected dead (``_slotloop.c``'s
        ``fast_deadline``): the smoothed RTT times :attr:`gain` (live workers send a slot's
        next round when the same multicast result reaches them, so their packets arrive within
        about that, later on a loaded host: then ``gain`` grows), within [``FAST_FLOOR``,
        deadline]. While ranks are suspected, a DEADLINE request's own round trip is an RTT
        sample (nothing else answers then)."""
        if self.cfg.suspect_wait is not None:
            d = self.cfg.suspect_wait
        else:
            rtt = (self.cfg.rto if self.srtt is None
                   else self.srtt + 4 * self.rttvar if self.self_release else self.srtt)
            d = rtt * self.gain
        # one live worker (the lowest rank not suspected) asks; the others wait twice as long,
        # as a backstop, so that the switch gets one DEADLINE per slot, not one per worker
        closer = 0
        while self.suspects >> closer & 1:
            closer += 1
        if self.rank != closer:
            d *= 2
        return min(max(d, FAST_FLOOR), self.cfg.deadline)

    def _rto(self) -> float:
        """Current base timeout: ``(srtt + 4·rttvar)·backoff`` within [rto, max_rto] (RFC 6298)."""
        base = self.cfg.rto if self.srtt is None else max(self.cfg.rto, self.srtt + 4 * self.rttvar)
        return min(base * self.backoff, self.cfg.max_rto)

    def _sample(self, rtt: float, per_rtt: int = 1) -> None:
        """Fold one RTT sample in; ``per_rtt`` samples arrive per round trip (the window).

        RFC 6298's gains (1/8, 1/4) assume one sample per round trip. The window yields one per
        packet, hundreds per round trip, and consecutive samples are alike, so with those gains
        ``rttvar`` collapses to ~0 and the timeout to the latest RTT: every jitter then fires
        spurious retransmissions, whose stored-result answers load the switch further. As RFC
        7323 (appendix G) advises, the gains are divided by the samples per round trip.
        """
        self.backoff = 1.0
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            a = 0.125 / per_rtt
            b = 0.25 / per_rtt
            self.rttvar = (1 - b) * self.rttvar + b * abs(self.srtt - rtt)
            self.srtt = (1 - a) * self.srtt + a * rtt

    def _header_fields(self, msg_type: int, lane_bits: int) -> list[int]:
        """THC header field values (layout order) shared by every packet of one exchange."""
        hdr = [0] * len(_FIELDS)
        hdr[_IDX["version"]] = wire.THC_VERSION
        hdr[_IDX["msg_type"]] = int(msg_type)
        hdr[_IDX["lane_bits"]] = lane_bits
        hdr[_IDX["job_id"]] = self.job_id
        hdr[_IDX["rank"]] = self.rank
        hdr[_IDX["token"]] = self.token
        # not sent as is: every packet's round is set per packet; the C loop reads the
        # session's round_base from here to set Flag.START
        hdr[_IDX["round"]], hdr[_IDX["round_hi"]] = round_fields(self.round_base)
        return hdr

    def exchange(self, kind: str, msg_type: MsgType, lane_bits: int, payloads: list[memoryview],
                 elem_counts: list[int], offsets: list[int], on_result: ResultHandler,
                 result_type: MsgType, result_lanes: int | None = None) -> None:
        """Send ``payloads`` (packet bodies) through the window and deliver each result once.

        Parameters
        ----------
        kind : {"data", "norm"}
            Which per-slot round counters to use.
        msg_type, lane_bits : wire type and lane width of the packets sent.
        payloads : list of memoryview
            Packet bodies (exactly the protocol's fixed payload size each).
        elem_counts, offsets : per packet: meaningful elements, and ``chunk_offset``.
        on_result : ResultHandler
            Receives (packet index, header tuple, datagram) for each accepted result.
        result_type : MsgType
            The message type of the answers (RESULT or NORM_RESULT).
        result_lanes : int, optional
            Lane width the answers must carry; another raises :class:`LaneMismatchError`.
        """
        n = len(payloads)
        if n == 0:
            return
        W = self.num_slots
        rounds = self.next_round[kind]
        base = rounds.tolist()
        uses = np.bincount(np.arange(n) % W, minlength=W)
        rounds += uses  # reserve the rounds now: every worker does the same
        cfg = self.cfg
        partial = cfg.policy == "partial"
        monotonic = time.monotonic
        t_start = monotonic()
        seen = 0   # ranks in some result of this exchange (the gain's evidence; ABSENT_WAITS)
        size = THC_HEADER_BYTES + len(payloads[0])
        nbuf = min(W, n)
        bufs = [bytearray(size) for _ in range(nbuf)]
        hdr = self._header_fields(msg_type, lane_bits)
        i_slot, i_round, i_set = _IDX["slot"], _IDX["round"], _IDX["slot_set"]
        i_hi = _IDX["round_hi"]
        i_cnt, i_off, i_flags = _IDX["elem_count"], _IDX["chunk_offset"], _IDX["flags"]
        i_type, i_job = _IDX["msg_type"], _IDX["job_id"]
        i_bitmap, i_count = _IDX["bitmap"], _IDX["count"]
        i_lane = _IDX["lane_bits"]
        pack_into = _HEADER.pack_into
        unpack_from = _HEADER.unpack_from
        job_id, world, rtype = self.job_id, self.world, int(result_type)
        # Per slot (plain lists: scalar access is several times cheaper than numpy's):
        # outstanding packet index (-1 none), its round (48 bits), first send, timeout, and
        # a generation that invalidates the slot's older entries in the timer heap.
        out_pkt = [-1] * W
        out_round = [0] * W
        first_sent = [0.0] * W
        rto = [0.0] * W
        retried = [False] * W
        asked_deadline = [False] * W
        dl_sent = [0.0] * W
        gen = [0] * W
        retries = [0] * W
        sent = [b""] * W   # each slot's outstanding packet as sent (for the repair store)
        rep_buf, rep_len = self.repair[kind]
        other_buf, other_len = self.repair["norm" if kind == "data" else "data"]
        flags_at = _FLAGS_AT
        timers: list[tuple[float, int, int]] = []  # (due, slot, generation), a heap
        stats = self.stats
        done = 0
        gain_srtt, gain_var = 0.125 / nbuf, 0.25 / nbuf  # see _sample

        round_base, token = self.round_base, self.token
        me = 1 << self.rank
        i_token = _IDX["token"]

        def build(s: int, i: int, flags: int) -> bytes:
            r = base[s] + i // W
            hdr[i_slot] = s
            hdr[i_round] = r & 0xFFFFFFFF
            hdr[i_hi] = (r >> 32) & 0xFFFF
            hdr[i_set] = r & 1
            hdr[i_cnt] = elem_counts[i]
            hdr[i_off] = offsets[i]
            hdr[i_flags] = flags | (_START if (r - round_base) & ROUND_MASK < 2 else 0)
            b = bufs[s % nbuf]
            pack_into(b, 0, *hdr)
            b[THC_HEADER_BYTES:] = payloads[i]
            return bytes(b)

        def launch(s: int, i: int, now: float, r: float) -> bytes:
            """Make packet ``i`` the outstanding one of slot ``s`` (sent at ``now``, timeout
            ``r``)."""
            out_pkt[s] = i
            out_round[s] = (base[s] + i // W) & ROUND_MASK
            first_sent[s] = now
            rto[s] = r
            retried[s] = False
            retries[s] = 0
            dl_sent[s] = 0.0
            asked_deadline[s] = False
            gen[s] += 1
            due = self._fast_deadline() if partial and self.suspects else r
            heappush(timers, (now + due, s, gen[s]))
            d = sent[s] = build(s, i, 0)
            return d

        # Fill the window.
        now = monotonic()
        r0 = self._rto()
        if self.srtt is None:
            # No RTT measured yet and a burst of up to ``nbuf`` packets from every worker to
            # queue at the switch: the last ones come back far later than one packet's RTT.
            # Without this a full first window (256) was retransmitted whole at ``rto``.
            r0 = min(cfg.max_rto, r0 * max(1.0, nbuf / 64))
        foreign0 = getattr(self.ep, "foreign", 0)
        first = [launch(s, s, now, r0) for s in range(nbuf)]
        self.ep.send_many(first)
        stats.packets += len(first)
        ep_batch = self.ep.batch
        recv_many = self.ep.recv_many
        while done < n:
            # Wake for the earliest timer (possibly a stale one: then just look again).
            wait = timers[0][0] - monotonic() if timers else 0.05
            batch = recv_many(min(max(wait, 0.0), 0.05))
            # Timestamps after the wait: RTT samples and new timers must not include the poll.
            now = monotonic()
            rto_now = self._rto()  # once per batch: new samples count from the next one
            srtt, rttvar, sampled = self.srtt, self.rttvar, False
            sends: list[bytes] = []
            for dg in batch:
                if len(dg) < THC_HEADER_BYTES:
                    stats.stray_results += 1
                    continue
                h = unpack_from(dg)
                s = h[i_slot]
                if (s >= W or h[i_type] != rtype or h[i_job] != job_id or out_pkt[s] < 0
                        or h[i_round] | h[i_hi] << 32 != out_round[s] or h[i_flags] & _PEEK):
                    stats.stray_results += 1
                    continue
                if h[i_token] != token:
                    stats.foreign_results += 1      # not the job's token: forged (issue 16)
                    continue
                if result_lanes is not None and h[i_lane] != result_lanes:
                    raise _lane_mismatch(job_id, h[i_lane], result_lanes)
                i = out_pkt[s]
                on_result(i, h, dg)
                # Karn: no samples from retransmitted packets, except the DEADLINE request's own
                # round trip while ranks are suspected dead (nothing else answers then)
                dl_sample = retried[s] and self.suspects != 0 and dl_sent[s] > 0
                if not retried[s] or dl_sample:
                    # inline _sample(rtt, nbuf): same arithmetic
                    rtt = now - (dl_sent[s] if dl_sample else first_sent[s])
                    if srtt is None:
                        srtt, rttvar = rtt, rtt / 2
                    else:
                        rttvar = (1 - gain_var) * rttvar + gain_var * abs(srtt - rtt)
                        srtt = (1 - gain_srtt) * srtt + gain_srtt * rtt
                    sampled = True
                cnt = h[i_count]
                if cnt < world:
                    stats.partial_results += 1
                    bm = h[i_bitmap]
                    miss = [r for r in range(world) if not bm >> r & 1]
                    stats.missing_ranks.update(miss)
                    bits = sum(1 << r for r in miss)
                    others = bits & ~me   # the gain's evidence (this worker knows it is alive)
                    self.dead &= others   # a rank in this result is not dead
                    if partial and now - first_sent[s] >= cfg.deadline / 2:
                        if others != self.dead:
                            self.gain = 1.0     # who is dead changed: start over
                        self.dead = others
                    elif partial and self.suspects:
                        late = others & ~self.dead
                        if late:
                            # a rank not known dead is missing: a live worker was later
                            # than the wait (counted once per round trip: not for packets
                            # sent before the last doubling) -- unless no result of this
                            # exchange had it yet: then it has not started (ABSENT_WAITS)
                            absent = not late & seen and (now - max(t_start, self.gain_t)
                                                          < ABSENT_WAITS * self._fast_deadline())
                            if first_sent[s] < self.gain_t or absent:
                                pass
                            elif self.gain >= GAIN_MAX:   # even after the longest wait: dead
                                self.dead, self.gain_t = others, now
                            else:
                                self.gain, self.gain_t = min(self.gain * 2, GAIN_MAX), now
                        else:
                            self.gain = max(self.gain * (1 - GAIN_EASE / nbuf), 1.0)
                    self.suspects = bits
                    self.self_release = not retried[s]
                    seen |= bm
                else:
                    seen |= h[i_bitmap]
                    self.suspects = self.dead = 0
                    self.self_release = False
                d = sent[s]
                rep_buf[s, : len(d)] = np.frombuffer(d, dtype=np.uint8)
                rep_buf[s, flags_at] = _RETX | (d[flags_at] & _START)
                rep_len[s] = len(d)
                if stats.min_count is None or cnt < stats.min_count:
                    stats.min_count = cnt
                done += 1
                nxt = i + W
                if nxt < n:
                    sends.append(launch(s, nxt, now, rto_now))
                else:
                    out_pkt[s] = -1
                    gen[s] += 1
            if sampled:
                self.srtt, self.rttvar, self.backoff = srtt, rttvar, 1.0
            if len(batch) >= ep_batch:
                # More results may wait in the socket: read them before judging any timeout,
                # or a slow receiver retransmits packets whose results it already holds.
                if sends:
                    self.ep.send_many(sends)
                    stats.packets += len(sends)
                continue
            while timers and timers[0][0] <= now:
                _due, s, g = heappop(timers)
                if g != gen[s] or out_pkt[s] < 0:
                    continue  # answered or re-armed since
                i = out_pkt[s]
                flags = _RETX
                age = now - first_sent[s]
                fast = partial and self.suspects != 0 and age < cfg.deadline
                if fast and age < self._fast_deadline():   # the wait grew since: not yet
                    heappush(timers, (first_sent[s] + self._fast_deadline(), s, g))
                    continue
                if partial and (age >= cfg.deadline or fast):
                    flags |= _DEADLINE
                    if not asked_deadline[s]:
                        stats.deadlines += 1
                        stats.fast_deadlines += fast
                        asked_deadline[s] = True
                    dl_sent[s] = now
                if age >= cfg.give_up + (cfg.deadline if partial else 0.0):
                    self._give_up(s, out_round[s], i, build)
                sends.append(build(s, i, flags))
                retries[s] += 1
                if retries[s] >= 2 and now >= self.next_repair:
                    for buf, lens in ((rep_buf, rep_len), (other_buf, other_len)):
                        for j in np.flatnonzero(lens > 0).tolist():
                            sends.append(buf[j, : lens[j]].tobytes())
                            stats.repairs += 1
                    self.next_repair = now + cfg.max_rto
                if not retried[s] and not fast:   # a fast deadline is no sign of loss
                    self.backoff = min(self.backoff * 2, 64.0)
                retried[s] = True
                stats.retransmits += 1
                rto[s] = min(rto[s] * 2, cfg.max_rto)
                heappush(timers, (now + rto[s], s, g))
            if sends:
                self.ep.send_many(sends)
                stats.packets += len(sends)
        stats.foreign_results += getattr(self.ep, "foreign", 0) - foreign0
        stats.seconds += monotonic() - t_start
        self.last_contact = time.time()

    def exchange_into(self, kind: str, msg_type: MsgType, lane_bits: int, payload: np.ndarray,
                      elem_counts: np.ndarray, offsets: np.ndarray, result_type: MsgType,
                      out: np.ndarray, lane_bytes: int, counts: np.ndarray | None = None) -> None:
        """:meth:`exchange` on arrays: each result's lanes go to ``out``, its count to ``counts``.

        Runs in C (``_slotloop``) when it is built, :attr:`native` is set and the endpoint
        exposes its socket (``endpoint.native(size)``); else through :meth:`exchange`. Same
        packets, same semantics, same statistics either way.

        Parameters
        ----------
        payload : numpy.ndarray
            ``uint8``, C-contiguous: the ``n`` packet bodies back to back (equal sizes).
        elem_counts, offsets : array-like of int, length ``n``
        out : numpy.ndarray
            ``uint8``, ``uint16`` or ``uint32`` (at least ``lane_bytes`` each), C-contiguous,
            ``n * lanes``: packet ``i``'s result lanes (big endian ``lane_bytes`` each on the
            wire) land in ``out[i*lanes:(i+1)*lanes]`` in native order (with 8-bit lanes and
            ``uint8`` sums, a plain copy).
        counts : numpy.ndarray, optional
            ``int32``, length ``n``: each result's contribution count.
        """
        n = len(elem_counts)
        if n == 0:
            return
        nb = payload.size // n
        lanes = out.size // n
        if payload.size != n * nb or out.size != n * lanes:
            raise ValueError("payload/out sizes do not match the packet count")
        if out.dtype not in (np.uint8, np.uint16, np.uint32) or out.itemsize < lane_bytes:
            raise ValueError(f"out: uint8, uint16 or uint32 of at least {lane_bytes} byte(s) "
                             f"per lane, not {out.dtype}")
        hook = getattr(self.ep, "native", None) if (self.native and _slotloop is not None) else None
        spec = hook(THC_HEADER_BYTES + nb) if hook is not None else None
        self.last_native = spec is not None
        if spec is None:
            mv = memoryview(np.ascontiguousarray(payload).reshape(-1))
            payloads = [mv[i * nb : (i + 1) * nb] for i in range(n)]
            wire_dt = np.dtype(f">u{lane_bytes}")
            i_count = _IDX["count"]

            def on_result(i: int, h: tuple, dg: memoryview) -> None:
                out[i * lanes : (i + 1) * lanes] = np.frombuffer(
                    dg, dtype=wire_dt, count=lanes, offset=THC_HEADER_BYTES)
                if counts is not None:
                    counts[i] = h[i_count]

            self.exchange(kind, msg_type, lane_bits, payloads, list(map(int, elem_counts)),
                          list(map(int, offsets)), on_result, result_type, 8 * lane_bytes)
            return
        fd, raw, dest, prefix, my_ip, thc_port, batch, gso = spec
        W = self.num_slots
        rounds = self.next_round[kind]
        base = rounds.copy()
        rounds += np.bincount(np.arange(n) % W, minlength=W)  # reserve, as exchange does
        hdr = self._header_fields(msg_type, lane_bits)
        template = _HEADER.pack(*hdr)
        cfg = self.cfg
        pay = np.ascontiguousarray(payload, dtype=np.uint8).reshape(-1)
        ec = np.ascontiguousarray(elem_counts, dtype=np.int64)
        of = np.ascontiguousarray(offsets, dtype=np.int64)
        rep, rep_len = self.repair[kind]
        other, other_len = self.repair["norm" if kind == "data" else "data"]
        t0 = time.monotonic()
        (status, srtt, rttvar, backoff, packets, retx, deadlines, stray, partial, min_count,
         missing, g_slot, g_pkt, g_round, foreign, bad_lane, suspects, next_repair,
         repairs, fast_deadlines, self.gain, self.gain_t, self.dead,
         self.self_release) = _slotloop.run(
            fd, int(raw), dest, prefix, my_ip, thc_port, batch, template, _C_FIELDS, pay, nb, n,
            ec, of, base, W, out, lanes, lane_bytes, counts, int(result_type), self.job_id,
            self.world, cfg.rto, cfg.max_rto, cfg.give_up, cfg.deadline,
            cfg.policy == "partial", -1.0 if self.srtt is None else self.srtt, self.rttvar,
            self.backoff, self.suspects, rep, rep_len, other, other_len, self.next_repair,
            cfg.suspect_wait or 0.0, FAST_FLOOR, self.gain, self.gain_t, self.dead,
            self.self_release, gso, out.itemsize, SPIN_US)
        self.suspects, self.next_repair = suspects, next_repair
        self.srtt = None if srtt < 0 else srtt
        self.rttvar, self.backoff = rttvar, backoff
        st = self.stats
        st.packets += packets
        st.retransmits += retx
        st.deadlines += deadlines
        st.stray_results += stray
        st.foreign_results += foreign
        st.repairs += repairs
        st.fast_deadlines += fast_deadlines
        st.partial_results += partial
        if min_count >= 0 and (st.min_count is None or min_count < st.min_count):
            st.min_count = min_count
        st.missing_ranks.update(r for r in range(self.world) if missing >> r & 1)
        st.seconds += time.monotonic() - t0
        if status == 2:
            raise _lane_mismatch(self.job_id, bad_lane, 8 * lane_bytes)
        if status == 1:
            bld = _HEADER.pack_into

            def build(s: int, i: int, flags: int) -> bytes:
                r = int(base[s]) + i // W
                hdr[_IDX["slot"]] = s
                hdr[_IDX["round"]], hdr[_IDX["round_hi"]] = round_fields(r)
                hdr[_IDX["slot_set"]] = r & 1
                hdr[_IDX["elem_count"]] = int(ec[i])
                hdr[_IDX["chunk_offset"]] = int(of[i])
                hdr[_IDX["flags"]] = flags | (_START if (r - self.round_base) & ROUND_MASK < 2
                                              else 0)
                b = bytearray(THC_HEADER_BYTES + nb)
                bld(b, 0, *hdr)
                b[THC_HEADER_BYTES:] = pay[i * nb : (i + 1) * nb].tobytes()
                return bytes(b)

            self._give_up(g_slot, g_round, g_pkt, build)
        self.last_contact = time.time()

    def _give_up(self, s: int, rnd: int, i: int, build: Callable[[int, int, int], bytes]) -> None:
        """Ask the switch who is in the slot (flag PEEK), then raise :class:`SlotTimeoutError`."""
        missing: list[int] | None = None
        self.ep.send_many([build(s, i, int(Flag.RETX | Flag.PEEK))])
        t_end = time.monotonic() + min(self.cfg.peek_wait, self.cfg.max_rto * 2)
        i_slot, i_round, i_bitmap, i_flags = _IDX["slot"], _IDX["round"], _IDX["bitmap"], _IDX["flags"]
        i_hi = _IDX["round_hi"]
        while missing is None and time.monotonic() < t_end:
            for dg in self.ep.recv_many(0.05):
                if len(dg) < THC_HEADER_BYTES:
                    continue
                h = _HEADER.unpack_from(dg)
                if (h[i_slot] == s and h[i_round] | h[i_hi] << 32 == rnd
                        and h[i_flags] & Flag.PEEK):
                    bm = h[i_bitmap]
                    missing = [r for r in range(self.world) if not bm >> r & 1]
        sw = getattr(self.ep, "switch", None)
        name = f"switch {sw[0]}:{sw[1]}" if isinstance(sw, tuple) else "the switch"
        if self.last_contact is None:
            last = "no exchange completed before"
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(self.last_contact))
            ms = int(self.last_contact % 1 * 1000)
            last = (f"last exchange completed at {stamp}.{ms:03d}, "
                    f"{time.time() - self.last_contact:.1f} s ago")
        who = (f"the switch names missing ranks {missing}" if missing is not None
               else f"{name} did not answer a status request either (is it running? is the "
                    f"job installed with this token, and this rank sending from its worker_port?)")
        raise SlotTimeoutError(
            f"job {self.job_id} rank {self.rank}: no result from {name} for slot {s} round {rnd} "
            f"after {self.cfg.give_up:.1f} s ({last}); {who}", missing)
