"""A scripted switch for the slot window's C and Python loops (drops, duplicates, stale answers,
partial counts) and one exchange through it (``tests/host/transport``)."""

from __future__ import annotations

import socket
import threading

import numpy as np

from host.protocol import codec as wire
from host.protocol.layout import COORDS_PER_PACKET, THC_HEADER, THC_HEADER_BYTES, Flag, MsgType
from host.transport.ports import UdpEndpoint
from host.transport.slots import SlotConfig, SlotWindow
from tests.support.token import TOKEN

_I = {f.name: i for i, f in enumerate(THC_HEADER)}
H = wire.HEADER_STRUCT


def lane_value(byte: np.ndarray, slot: int, lane_bits: int = 16) -> np.ndarray:
    """The lanes :class:`ScriptedSwitch` answers a packet's payload bytes with (uint32): every
    byte of a lane depends on the payload (32-bit lanes spread it over all four)."""
    b = byte.astype(np.uint64)
    if lane_bits == 32:
        return ((b * 0x01000193 + slot * 0x0101) & 0xFFFFFFFF).astype(np.uint32)
    return ((b * 3 + slot) & ((1 << lane_bits) - 1)).astype(np.uint32)


class ScriptedSwitch:
    """A UDP 'switch' for one worker that answers by a fixed script and records every packet.

    The first transmission of packets with ``offset // 256 % 7 == 3`` is dropped; every 5th
    packet is answered twice (a duplicate); every 9th also gets a stale answer (previous round)
    before the real one, so that no stray answer trails the exchange's last result (which one
    a loop still reads would depend on timing; C and Python must count the same strays);
    packets with ``offset // 256 % 11 == 4`` get a partial result (count 1, bitmap of rank 0).
    Result lanes are :func:`lane_value` of each payload byte in ``lane_bits``-bit lanes (16
    unless told: ``(payload byte * 3 + slot) & 0xFFFF``). With ``forged``,
    every answer is preceded by the same answer with another token and lanes 0xFFFF (what a
    forger who cannot read the token sends): a worker must take only the real one. With
    ``other_session``, by the same answer with the job's token but another ``round_hi`` (a
    result of a session 2^32 rounds away, replayed) and lanes 0xFFFF: likewise.
    """

    #: class defaults, for subclasses with their own ``__init__`` (a UDP-Lite one)
    forged = False
    other_session = False
    lane_bits = 16

    def __init__(self, forged: bool = False, lane_bits: int = 16,
                 other_session: bool = False) -> None:
        self.forged = forged
        self.other_session = other_session
        self.lane_bits = lane_bits
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.log: list[tuple] = []
        self.seen: set[tuple[int, int]] = set()
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.getsockname()

    def answer(self, h: tuple, payload: bytes, rnd: int, count: int, bm: int) -> bytes:
        out = list(h)
        out[_I["msg_type"]] = int(MsgType.RESULT)
        lb = self.lane_bits
        out[_I["lane_bits"]] = lb   # what the lanes below are (the worker checks it)
        out[_I["round"]] = rnd & 0xFFFFFFFF
        out[_I["slot_set"]] = rnd & 1
        out[_I["flags"]] = 0
        out[_I["count"]] = count
        out[_I["bitmap"]] = bm
        lanes = lane_value(np.frombuffer(payload, dtype=np.uint8), h[_I["slot"]], lb)
        body = np.zeros(COORDS_PER_PACKET, dtype=f">u{lb // 8}")
        body[: lanes.size] = lanes
        return H.pack(*out) + body.tobytes()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                d, addr = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            h = H.unpack_from(d)
            payload = d[THC_HEADER_BYTES:]
            self.log.append((h[_I["slot"]], h[_I["round"]], h[_I["slot_set"]], h[_I["flags"]],
                             h[_I["elem_count"]], h[_I["chunk_offset"]], payload))
            self.respond(h, payload, addr)

    def respond(self, h: tuple, payload: bytes, addr) -> None:
        """Answer one recorded packet by the script (the class docstring)."""
        k = h[_I["chunk_offset"]] // COORDS_PER_PACKET
        key = (h[_I["slot"]], h[_I["round"]])
        first = key not in self.seen
        self.seen.add(key)
        if first and k % 7 == 3:
            return
        partial = k % 11 == 4
        a = self.answer(h, payload, h[_I["round"]], 1 if partial else 2, 1 if partial else 3)
        if self.forged:
            bad = list(H.unpack_from(a))
            bad[_I["token"]] ^= 0x80000001
            self.sock.sendto(H.pack(*bad) + b"\xff" * (len(a) - THC_HEADER_BYTES), addr)
        if self.other_session:
            old = list(H.unpack_from(a))
            old[_I["round_hi"]] ^= 1
            self.sock.sendto(H.pack(*old) + b"\xff" * (len(a) - THC_HEADER_BYTES), addr)
        if k % 9 == 0:   # the stale answer first: the exchange's last answer is never one
            self.sock.sendto(self.answer(h, payload, h[_I["round"]] - 1, 2, 3), addr)
        self.sock.sendto(a, addr)
        if k % 5 == 0:
            self.sock.sendto(a, addr)

    def close(self) -> None:
        self.stop.set()
        self.t.join(2)
        self.sock.close()


def scripted_exchange(native: bool, n: int = 300, W: int = 16, expect: bool | None = None,
                      sw: ScriptedSwitch | None = None, ep: UdpEndpoint | None = None,
                      token: int = TOKEN, lane_bits: int = 16, out_dtype=np.uint32) -> tuple:
    """One exchange of ``n`` packets through a scripted switch (``sw``, or a new one answering
    in ``lane_bits``-bit lanes) from ``ep`` (or a new UDP endpoint) with the job token
    ``token`` into sums of ``out_dtype``; returns (window, lanes, counts, the switch's log,
    payload)."""
    sw = sw or ScriptedSwitch(lane_bits=lane_bits)
    ep = ep or UdpEndpoint(sw.address, bind=("127.0.0.1", 0))
    win = SlotWindow(ep, job_id=7, rank=0, world=2, num_slots=W,
                     config=SlotConfig(rto=0.15, max_rto=0.4), round_base=0xFFFFFFF0,
                     token=token)
    payload = np.random.default_rng(5).integers(0, 256, size=n * 128, dtype=np.uint8)
    counts = np.full(n, COORDS_PER_PACKET, dtype=np.int64)
    counts[-1] = 17
    out, cnt = _exchange(win, native, sw, ep, payload, counts, sw.lane_bits, out_dtype)
    assert win.last_native == (native if expect is None else expect)
    return win, out, cnt, sw.log, payload


def _exchange(win: SlotWindow, native: bool, sw: ScriptedSwitch, ep: UdpEndpoint,
              payload: np.ndarray, counts: np.ndarray,
              lane_bits: int = 16, out_dtype=np.uint32) -> tuple[np.ndarray, np.ndarray]:
    """``win``'s exchange of DATA packets (4-bit indices, ``counts`` coordinates each) for
    RESULT lanes of ``lane_bits`` through ``sw`` into sums of ``out_dtype``; closes ``ep`` and
    ``sw``; returns (lanes, counts)."""
    win.native = native
    n = len(counts)
    offsets = np.arange(n, dtype=np.int64) * COORDS_PER_PACKET
    out = np.full(n * COORDS_PER_PACKET, 0xA5, dtype=out_dtype)   # a lane not written shows
    cnt = np.zeros(n, dtype=np.int32)
    try:
        win.exchange_into("data", MsgType.DATA, 4, payload, counts, offsets, MsgType.RESULT,
                          out, lane_bits // 8, cnt)
    finally:
        ep.close()
        sw.close()
    return out, cnt


class DeadlineSwitch(ScriptedSwitch):
    """A scripted switch for rank 0 of a job of three whose rank 2 is dead: it answers only
    DEADLINE requests (what the real one does while a contribution is missing), each with the
    bitmap ``bitmap_of(packet index)`` (ranks 0 and 1, or rank 0 alone where rank 1 is late)
    and its popcount as the count; it records every packet like :class:`ScriptedSwitch`."""

    def __init__(self, bitmap_of) -> None:
        self.bitmap_of = bitmap_of
        super().__init__()

    def respond(self, h: tuple, payload: bytes, addr) -> None:
        if h[_I["flags"]] & int(Flag.DEADLINE):
            bm = self.bitmap_of(h[_I["chunk_offset"]] // COORDS_PER_PACKET)
            self.sock.sendto(self.answer(h, payload, h[_I["round"]], bm.bit_count(), bm), addr)


class AbsentHoldingSwitch(DeadlineSwitch):
    """A :class:`DeadlineSwitch` that, from packet ``hold_from`` on, answers every first
    transmission at once, as a switch that holds rank 2 absent does (docs/protocol.md, "Absent
    contributors")."""

    def __init__(self, bitmap_of, hold_from: int) -> None:
        self.hold_from = hold_from
        super().__init__(bitmap_of)

    def respond(self, h: tuple, payload: bytes, addr) -> None:
        i = h[_I["chunk_offset"]] // COORDS_PER_PACKET
        if i >= self.hold_from and not h[_I["flags"]] & int(Flag.RETX):
            bm = self.bitmap_of(i)
            self.sock.sendto(self.answer(h, payload, h[_I["round"]], bm.bit_count(), bm), addr)
        else:
            super().respond(h, payload, addr)


def deadline_exchange(native: bool, bitmap_of, n: int, W: int = 4,
                      sw: DeadlineSwitch | None = None) -> tuple:
    """One partial-policy exchange of ``n`` packets of rank 0 (world 3) through a
    :class:`DeadlineSwitch` (or ``sw``); returns (window, counts, the switch's log)."""
    sw = sw or DeadlineSwitch(bitmap_of)
    ep = UdpEndpoint(sw.address, bind=("127.0.0.1", 0))
    win = SlotWindow(ep, job_id=7, rank=0, world=3, num_slots=W,
                     config=SlotConfig(policy="partial", deadline=0.3, rto=0.05, max_rto=0.2))
    _, cnt = _exchange(win, native, sw, ep, np.zeros(n * 128, dtype=np.uint8),
                       np.full(n, COORDS_PER_PACKET, dtype=np.int64))
    assert win.last_native == native
    return win, cnt, sw.log


def deadline_exchanges(native: bool, bitmaps: list, n: int, W: int,
                       config: SlotConfig) -> tuple[SlotWindow, list[np.ndarray]]:
    """Consecutive partial-policy exchanges of ``n`` packets each of rank 0 (world 3) in one
    window, through one :class:`DeadlineSwitch` that answers the k-th exchange with
    ``bitmaps[k]`` (a ``bitmap_of``); returns (window, each exchange's counts)."""
    sw = DeadlineSwitch(bitmaps[0])
    ep = UdpEndpoint(sw.address, bind=("127.0.0.1", 0))
    win = SlotWindow(ep, job_id=7, rank=0, world=3, num_slots=W, config=config)
    win.native = native
    elems = np.full(n, COORDS_PER_PACKET, dtype=np.int64)
    offsets = np.arange(n, dtype=np.int64) * COORDS_PER_PACKET
    counts = []
    try:
        for bitmap_of in bitmaps:
            sw.bitmap_of = bitmap_of
            out = np.zeros(n * COORDS_PER_PACKET, dtype=np.uint32)
            cnt = np.zeros(n, dtype=np.int32)
            win.exchange_into("data", MsgType.DATA, 4, np.zeros(n * 128, dtype=np.uint8), elems,
                              offsets, MsgType.RESULT, out, 2, cnt)
            assert win.last_native == native
            counts.append(cnt)
    finally:
        ep.close()
        sw.close()
    return win, counts
