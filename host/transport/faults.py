"""Fault injection at a worker's endpoint: loss, duplication, reordering and delay, no root.

:class:`FaultyEndpoint` wraps any :class:`~host.transport.ports.Endpoint` and applies seeded
random faults to what it sends and what it receives, so the slot window's reliability can be
exercised against a real switch on loopback (the kernel here has no netem). Link-level
impairments between real interfaces are the impairment node's job (:mod:`control_plane.testbed.impair`).
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from host.transport.ports import Endpoint


@dataclass
class FaultStats:
    sent: int = 0
    received: int = 0
    dropped: int = 0
    duplicated: int = 0
    delayed: int = 0


class FaultyEndpoint:
    """An endpoint whose traffic is lost, duplicated, reordered and delayed at random.

    Parameters
    ----------
    inner : Endpoint
    loss_pct, dup_pct : float
        Chance in % that a datagram (each direction) is dropped / delivered twice.
    reorder_pct : float
        Chance in % that a datagram is held back ``reorder_ms`` so later ones overtake it.
    delay_ms : float
        Added to every datagram (both directions).
    seed : int
    die_after : int, optional
        After this many datagrams sent, the endpoint goes silent for good (a worker killed
        mid-round): nothing more leaves or arrives.
    """

    def __init__(self, inner: Endpoint, loss_pct: float = 0.0, dup_pct: float = 0.0,
                 reorder_pct: float = 0.0, delay_ms: float = 0.0, reorder_ms: float = 5.0,
                 seed: int = 0, die_after: int | None = None) -> None:
        for name, v in (("loss_pct", loss_pct), ("dup_pct", dup_pct), ("reorder_pct", reorder_pct)):
            if not 0.0 <= v <= 100.0:
                raise ValueError(f"{name}={v}: must be a percentage 0..100")
        if delay_ms < 0 or reorder_ms < 0:
            raise ValueError("delays must be >= 0")
        self.inner = inner
        self.loss, self.dup, self.reorder = loss_pct / 100, dup_pct / 100, reorder_pct / 100
        self.delay, self.reorder_s = delay_ms / 1000, reorder_ms / 1000
        self.rng = random.Random(seed)
        self.stats = FaultStats()
        self.die_after = die_after
        self._held_out: list[tuple[float, int, bytes]] = []
        self._held_in: list[tuple[float, int, bytes]] = []
        self._seq = 0

    def _fate(self, data: bytes, held: list, now: float) -> list[bytes]:
        """Datagrams to pass on now; the rest go to ``held``."""
        rnd = self.rng.random
        if rnd() < self.loss:
            self.stats.dropped += 1
            return []
        copies = 2 if rnd() < self.dup else 1
        if copies == 2:
            self.stats.duplicated += 1
        out = []
        for _ in range(copies):
            wait = self.delay + (self.reorder_s if rnd() < self.reorder else 0.0)
            if wait <= 0:
                out.append(data)
            else:
                self.stats.delayed += 1
                self._seq += 1
                heapq.heappush(held, (now + wait, self._seq, data))
        return out

    @staticmethod
    def _due(held: list, now: float) -> list[bytes]:
        out = []
        while held and held[0][0] <= now:
            out.append(heapq.heappop(held)[2])
        return out

    @property
    def batch(self) -> int:
        return self.inner.batch

    @property
    def dead(self) -> bool:
        return self.die_after is not None and self.stats.sent >= self.die_after

    def send_many(self, datagrams: Sequence[bytes | bytearray | memoryview]) -> None:
        if self.die_after is not None:
            room = max(0, self.die_after - self.stats.sent)
            self.stats.dropped += max(0, len(datagrams) - room)
            datagrams = list(datagrams)[:room]
        now = time.monotonic()
        out = self._due(self._held_out, now)
        for d in datagrams:
            self.stats.sent += 1
            out.extend(self._fate(bytes(d), self._held_out, now))
        if out:
            self.inner.send_many(out)

    def recv_many(self, timeout: float) -> list[memoryview]:
        if self.dead:
            time.sleep(timeout)
            return []
        now = time.monotonic()
        late = self._due(self._held_out, now)
        if late:
            self.inner.send_many(late)
        nxt = min([h[0] for h in (self._held_in[:1] + self._held_out[:1])], default=None)
        wait = timeout if nxt is None else max(0.0, min(timeout, nxt - now))
        got = []
        for dg in self.inner.recv_many(wait):
            self.stats.received += 1
            got.extend(self._fate(bytes(dg), self._held_in, time.monotonic()))
        got.extend(self._due(self._held_in, time.monotonic()))
        return [memoryview(g) for g in got]

    @property
    def foreign(self) -> int:
        """Datagrams the wrapped endpoint dropped as not from the switch."""
        return getattr(self.inner, "foreign", 0)

    def close(self) -> None:
        self.inner.close()


class FaultyRelay:
    """A UDP relay between one worker and the switch with :class:`FaultyEndpoint`'s faults.

    For endpoints whose slot loop runs in C (``slots._slotloop`` drives the socket itself, so
    no Python wrapper sees its datagrams): the worker's :class:`UdpEndpoint` sends to
    :attr:`address`; a thread forwards each datagram to the switch from a socket bound to
    ``bind_ip`` (the worker's address, so the switch's sender check passes) through a
    :class:`FaultyEndpoint` and relays the answers back, faults applied both ways.

    Parameters
    ----------
    switch : (host, port)
        The switch's UDP address for this worker.
    bind_ip : str
        Address the switch must see as the sender (the worker's).
    **faults
        :class:`FaultyEndpoint` parameters (loss_pct, dup_pct, reorder_pct, delay_ms,
        reorder_ms, seed, die_after).

    Attributes
    ----------
    drop_down : callable, optional
        ``drop_down(datagram) -> bool``: datagrams towards the worker for which it returns
        True are dropped (a test cuts one kind of answer off, e.g. a worker that does not get
        a round's results while the others do); None (default) drops nothing more.
    """

    def __init__(self, switch: tuple[str, int], bind_ip: str, **faults: float) -> None:
        import select
        import socket
        import threading

        from host.transport.ports import UdpEndpoint

        self._select = select.select
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.front.setblocking(False)
        self.back = FaultyEndpoint(UdpEndpoint(switch, bind=(bind_ip, 0)), **faults)
        self.worker: tuple[str, int] | None = None
        self.drop_down: Callable[[bytes], bool] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="faulty-relay")
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        """Where the worker sends (its endpoint's ``switch``)."""
        return self.front.getsockname()

    @property
    def stats(self) -> FaultStats:
        return self.back.stats

    def _run(self) -> None:
        inner = self.back.inner.sock
        while not self._stop.is_set():
            self._select([self.front, inner], [], [], 0.001)
            up = []
            while True:
                try:
                    d, addr = self.front.recvfrom(4096)
                except (BlockingIOError, InterruptedError):
                    break
                self.worker = addr
                up.append(d)
            if up:
                self.back.send_many(up)
            down = self.back.recv_many(0.0)
            if down and self.worker is not None:
                cut = self.drop_down
                for d in down:
                    b = bytes(d)
                    if cut is None or not cut(b):
                        self.front.sendto(b, self.worker)

    def close(self) -> None:
        """Stop the thread and close both sockets."""
        self._stop.set()
        self._thread.join(2)
        self.front.close()
        self.back.close()
