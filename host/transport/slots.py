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
first sent, to release the slot's current sum (flag DEADLINE) and accepts it with its count m.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from host.protocol import codec as wire
from host.protocol.layout import THC_HEADER, THC_HEADER_BYTES, Flag, MsgType
from host.transport.ports import Endpoint

log = logging.getLogger(__name__)

_FIELDS = [f.name for f in THC_HEADER]
_IDX = {name: i for i, name in enumerate(_FIELDS)}
_HEADER = wire.HEADER_STRUCT


class SlotTimeoutError(TimeoutError):
    """A slot got no result in time; the message names the job, slot, round and missing ranks."""

    def __init__(self, message: str, missing: list[int] | None = None) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass
class SlotConfig:
    """Timing and policy of the slot window.

    Parameters
    ----------
    rto : float
        Initial and minimum retransmission timeout (s); adapts to the round trip, doubles per
        retry, up to ``max_rto``.
    give_up : float
        ``exact``: seconds without a result on one slot before :class:`SlotTimeoutError`.
    deadline : float
        ``partial``: seconds after a packet's first send before asking for the partial sum.
    policy : {"exact", "partial"}
    """

    rto: float = 0.02
    max_rto: float = 0.5
    give_up: float = 10.0
    deadline: float = 0.5
    policy: str = "exact"

    def __post_init__(self) -> None:
        if self.policy not in ("exact", "partial"):
            raise ValueError(f"policy={self.policy!r}: choose 'exact' or 'partial'")
        if self.rto <= 0 or self.max_rto < self.rto:
            raise ValueError("need 0 < rto <= max_rto")


@dataclass
class ExchangeStats:
    """Counters of one or more exchanges."""

    packets: int = 0
    retransmits: int = 0
    deadlines: int = 0
    stray_results: int = 0
    partial_results: int = 0
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
                 config: SlotConfig | None = None, round_base: int = 1) -> None:
        if num_slots < 1:
            raise ValueError("num_slots must be >= 1")
        self.ep = endpoint
        self.job_id = job_id
        self.rank = rank
        self.world = world
        self.num_slots = num_slots
        self.cfg = config or SlotConfig()
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

    def _rto(self) -> float:
        """Current base timeout: ``(srtt + 4·rttvar)·backoff`` within [rto, max_rto] (RFC 6298)."""
        base = self.cfg.rto if self.srtt is None else max(self.cfg.rto, self.srtt + 4 * self.rttvar)
        return min(base * self.backoff, self.cfg.max_rto)

    def _sample(self, rtt: float) -> None:
        self.backoff = 1.0
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    def exchange(self, kind: str, msg_type: MsgType, lane_bits: int, payloads: list[memoryview],
                 elem_counts: list[int], offsets: list[int], on_result: ResultHandler,
                 result_type: MsgType) -> None:
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
        """
        n = len(payloads)
        if n == 0:
            return
        W = self.num_slots
        rounds = self.next_round[kind]
        base = rounds.copy()
        uses = np.bincount(np.arange(n) % W, minlength=W)
        rounds += uses  # reserve the rounds now: every worker does the same
        cfg = self.cfg
        t_start = time.monotonic()
        size = THC_HEADER_BYTES + len(payloads[0])
        bufs = [bytearray(size) for _ in range(min(W, n))]
        hdr = [0] * len(_FIELDS)
        hdr[_IDX["version"]] = wire.THC_VERSION
        hdr[_IDX["msg_type"]] = int(msg_type)
        hdr[_IDX["lane_bits"]] = lane_bits
        hdr[_IDX["job_id"]] = self.job_id
        hdr[_IDX["rank"]] = self.rank
        i_slot, i_round, i_set = _IDX["slot"], _IDX["round"], _IDX["slot_set"]
        i_cnt, i_off, i_flags = _IDX["elem_count"], _IDX["chunk_offset"], _IDX["flags"]
        # Outstanding per slot: packet index (-1 none), round, first send, next timeout, rto.
        out_pkt = np.full(W, -1, dtype=np.int64)
        out_round = np.zeros(W, dtype=np.int64)
        first_sent = np.zeros(W)
        due = np.full(W, np.inf)
        rto = np.full(W, self._rto())
        retried = np.zeros(W, dtype=bool)
        asked_deadline = np.zeros(W, dtype=bool)
        done = 0
        next_pkt = 0

        def build(s: int, i: int, flags: int) -> bytearray:
            r = int(base[s] + i // W)
            hdr[i_slot] = s
            hdr[i_round] = r & 0xFFFFFFFF
            hdr[i_set] = r & 1
            hdr[i_cnt] = elem_counts[i]
            hdr[i_off] = offsets[i]
            hdr[i_flags] = flags
            b = bufs[s % len(bufs)]
            _HEADER.pack_into(b, 0, *hdr)
            b[THC_HEADER_BYTES:] = payloads[i]
            return b

        # Fill the window.
        now = time.monotonic()
        first = []
        while next_pkt < n and next_pkt < W:
            s = next_pkt
            first.append(bytes(build(s, next_pkt, 0)))
            out_pkt[s] = next_pkt
            out_round[s] = base[s] + next_pkt // W
            first_sent[s] = now
            due[s] = now + rto[s]
            next_pkt += 1
        self.ep.send_many(first)
        self.stats.packets += len(first)
        i_type, i_job, i_bitmap, i_count = _IDX["msg_type"], _IDX["job_id"], _IDX["bitmap"], _IDX["count"]
        while done < n:
            now = time.monotonic()
            wait = float(due.min() - now)
            batch = self.ep.recv_many(max(0.0, min(wait, 0.05)))
            sends: list[bytes] = []
            for dg in batch:
                if len(dg) < THC_HEADER_BYTES:
                    self.stats.stray_results += 1
                    continue
                h = _HEADER.unpack_from(dg)
                s = h[i_slot]
                if (h[i_type] != result_type or h[i_job] != self.job_id or s >= W
                        or out_pkt[s] < 0 or h[i_round] != (out_round[s] & 0xFFFFFFFF)
                        or h[i_flags] & Flag.PEEK):
                    self.stats.stray_results += 1
                    continue
                i = int(out_pkt[s])
                on_result(i, h, dg)
                if not retried[s]:
                    self._sample(now - first_sent[s])
                cnt = h[i_count]
                if cnt < self.world:
                    self.stats.partial_results += 1
                    bm = h[i_bitmap]
                    self.stats.missing_ranks.update(r for r in range(self.world) if not bm >> r & 1)
                self.stats.min_count = cnt if self.stats.min_count is None else min(self.stats.min_count, cnt)
                done += 1
                nxt = i + W
                if nxt < n:
                    sends.append(bytes(build(s, nxt, 0)))
                    out_pkt[s] = nxt
                    out_round[s] = base[s] + nxt // W
                    first_sent[s] = now
                    rto[s] = self._rto()
                    due[s] = now + rto[s]
                    retried[s] = False
                    asked_deadline[s] = False
                else:
                    out_pkt[s] = -1
                    due[s] = np.inf
            if len(batch) >= self.ep.batch:
                # More results may wait in the socket: read them before judging any timeout,
                # or a slow receiver retransmits packets whose results it already holds.
                if sends:
                    self.ep.send_many(sends)
                    self.stats.packets += len(sends)
                continue
            now = time.monotonic()
            for s in np.nonzero(due <= now)[0]:
                i = int(out_pkt[s])
                flags = int(Flag.RETX)
                if cfg.policy == "partial" and now - first_sent[s] >= cfg.deadline:
                    flags |= int(Flag.DEADLINE)
                    if not asked_deadline[s]:
                        self.stats.deadlines += 1
                        asked_deadline[s] = True
                elif cfg.policy == "exact" and now - first_sent[s] >= cfg.give_up:
                    self._give_up(int(s), int(out_round[s]), i, build)
                sends.append(bytes(build(int(s), i, flags)))
                if not retried[s]:
                    self.backoff = min(self.backoff * 2, 64.0)
                retried[s] = True
                self.stats.retransmits += 1
                rto[s] = min(rto[s] * 2, cfg.max_rto)
                due[s] = now + rto[s]
            if sends:
                self.ep.send_many(sends)
                self.stats.packets += len(sends)
        self.stats.seconds += time.monotonic() - t_start

    def _give_up(self, s: int, rnd: int, i: int, build: Callable[[int, int, int], bytearray]) -> None:
        """Ask the switch who is in the slot (flag PEEK), then raise :class:`SlotTimeoutError`."""
        missing: list[int] | None = None
        self.ep.send_many([bytes(build(s, i, int(Flag.RETX | Flag.PEEK)))])
        t_end = time.monotonic() + min(1.0, self.cfg.max_rto * 2)
        i_slot, i_round, i_bitmap, i_flags = _IDX["slot"], _IDX["round"], _IDX["bitmap"], _IDX["flags"]
        while missing is None and time.monotonic() < t_end:
            for dg in self.ep.recv_many(0.05):
                if len(dg) < THC_HEADER_BYTES:
                    continue
                h = _HEADER.unpack_from(dg)
                if h[i_slot] == s and h[i_round] == rnd and h[i_flags] & Flag.PEEK:
                    bm = h[i_bitmap]
                    missing = [r for r in range(self.world) if not bm >> r & 1]
        who = (f"missing ranks {missing}" if missing is not None
               else "the switch did not answer a status request (is the job installed?)")
        raise SlotTimeoutError(
            f"job {self.job_id} rank {self.rank}: no result for slot {s} round {rnd} after "
            f"{self.cfg.give_up:.1f} s in exact mode; {who}", missing)
