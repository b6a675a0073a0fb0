"""The impairment node's data path: a user-space forwarder between two interfaces.

For kernels without ``sch_netem``: frames read (AF_PACKET, raw Ethernet) on one interface are
written to the other after the decisions of
:class:`~control_plane.testbed.impair.params.Impairment` — drop, duplicate, hold for
``delay ± jitter``, hold back some longer so later frames overtake them. Held frames wait in a
heap ordered by departure time (ties keep arrival order, so a constant delay never reorders).
The loop sleeps in ``epoll`` until the next frame is due or one arrives; departure times are
met to about a millisecond (epoll's resolution).

A bandwidth cap is not done here: the node shapes its egress with ``tc tbf``
(:func:`control_plane.testbed.impair.node.setup_commands`), which the forwarder's writes pass
through; frames the full queue refuses (ENOBUFS) count as ``overflow``.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import logging
import random
import select
import socket
import threading
import time
from dataclasses import dataclass, field

from control_plane.testbed.impair.params import Impairment

log = logging.getLogger(__name__)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
MAX_FRAME = 65536


@dataclass
class DirectionStats:
    """Counters of one direction (frames)."""

    received: int = 0
    sent: int = 0
    dropped: int = 0
    duplicated: int = 0
    reordered: int = 0
    overflow: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class _Direction:
    rx: socket.socket
    tx: socket.socket
    rng: random.Random
    stats: DirectionStats = field(default_factory=DirectionStats)


def open_packet_socket(ifname: str) -> socket.socket:
    """A non-blocking AF_PACKET socket on ``ifname`` that sees every frame but its own."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    with contextlib.suppress(OSError):  # kernels < 4.20: filtered by pkttype in the loop
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        s.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
    s.bind((ifname, 0))
    s.setblocking(False)
    return s


class Forwarder:
    """Forward frames between interfaces ``if_a`` and ``if_b`` with ``imp`` applied.

    Parameters
    ----------
    if_a, if_b : str
        Interface names (in the caller's network namespace). Direction 0 is a → b.
    imp : Impairment
    socks : (socket, socket), optional
        Already open packet sockets for a and b (e.g. opened inside another namespace);
        default: open them here.
    batch : int
        Frames drained per wake-up and socket.
    """

    def __init__(self, if_a: str, if_b: str, imp: Impairment,
                 socks: tuple[socket.socket, socket.socket] | None = None, batch: int = 256) -> None:
        self.if_a, self.if_b, self.imp = if_a, if_b, imp
        sa, sb = socks if socks is not None else (open_packet_socket(if_a), open_packet_socket(if_b))
        self._socks = (sa, sb)
        self.dirs = (
            _Direction(sa, sb, random.Random(f"{imp.seed}/0")),
            _Direction(sb, sa, random.Random(f"{imp.seed}/1")),
        )
        self.batch = batch
        self.stop_event = threading.Event()
        self._heap: list[tuple[float, int, int, bytes]] = []  # (due, seq, direction, frame)
        self._seq = 0

    def stats(self) -> dict:
        """Counters per direction, ``a->b`` and ``b->a``."""
        return {"a": self.if_a, "b": self.if_b, "impairment": self.imp.to_dict(),
                "a->b": self.dirs[0].stats.to_dict(), "b->a": self.dirs[1].stats.to_dict(),
                "held": len(self._heap)}

    # -- data path -----------------------------------------------------------------------
    def _send(self, d: int, frame: bytes) -> None:
        dr = self.dirs[d]
        try:
            dr.tx.send(frame)
            dr.stats.sent += 1
        except (BlockingIOError, InterruptedError):
            dr.stats.overflow += 1
        except OSError as exc:
            if exc.errno not in (errno.ENOBUFS, errno.EMSGSIZE, errno.ENETDOWN, errno.ENXIO):
                raise
            dr.stats.overflow += 1

    def _admit(self, d: int, frame: bytes, now: float) -> None:
        """Decide a received frame's fate (THC-independent: every frame alike)."""
        imp = self.imp
        dr = self.dirs[d]
        rnd = dr.rng.random
        dr.stats.received += 1
        if imp.loss_pct and rnd() * 100.0 < imp.loss_pct:
            dr.stats.dropped += 1
            return
        copies = 1
        if imp.dup_pct and rnd() * 100.0 < imp.dup_pct:
            copies = 2
            dr.stats.duplicated += 1
        for _ in range(copies):
            delay = imp.delay_ms
            if imp.jitter_ms:
                delay += dr.rng.uniform(-imp.jitter_ms, imp.jitter_ms)
            if imp.reorder_pct and rnd() * 100.0 < imp.reorder_pct:
                delay += imp.reorder_gap_ms
                dr.stats.reordered += 1
            if delay <= 0.0 and not self._heap:
                self._send(d, frame)
                continue
            self._seq += 1
            heapq.heappush(self._heap, (now + max(delay, 0.0) / 1000.0, self._seq, d, frame))

    def _release(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, d, frame = heapq.heappop(heap)
            self._send(d, frame)

    def _drain(self, d: int) -> None:
        rx = self.dirs[d].rx
        for _ in range(self.batch):
            try:
                frame, addr = rx.recvfrom(MAX_FRAME)
            except (BlockingIOError, InterruptedError):
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            self._admit(d, frame, time.monotonic())

    def run(self) -> None:
        """Forward until :attr:`stop_event` is set (checked at least every 100 ms)."""
        ep = select.epoll()
        fds = {s.fileno(): i for i, s in enumerate(self._socks)}
        for fd in fds:
            ep.register(fd, select.EPOLLIN)
        try:
            while not self.stop_event.is_set():
                now = time.monotonic()
                self._release(now)
                wait = 0.1
                if self._heap:
                    wait = min(wait, max(0.0, self._heap[0][0] - now))
                for fd, _ in ep.poll(wait):
                    self._drain(fds[fd])
                self._release(time.monotonic())
        finally:
            ep.close()

    def start(self) -> threading.Thread:
        """Run :meth:`run` in a daemon thread (for in-process use and tests)."""
        t = threading.Thread(target=self.run, name=f"impair-{self.if_a}-{self.if_b}", daemon=True)
        t.start()
        return t

    def close(self) -> None:
        """Stop and close both sockets."""
        self.stop_event.set()
        for s in self._socks:
            s.close()
