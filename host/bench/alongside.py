"""One datagram sent over and over beside a measurement, its answers counted.

The shared-host case of issue 33 (item 3): a second job's member on the same address as a
first job's member, on another UDP port, sending valid status requests all along (each one
answered, so each teaches the switch its port). ``benchmarks/chaos.py`` (``cross_job``) and
its regression test (tests/host/softswitch/test_softswitch_jobs_on_one_host.py) run it the same
way through :func:`sending_alongside`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol


class _Endpoint(Protocol):
    def send_many(self, frames: list[bytes]) -> object: ...

    def recv_many(self, timeout: float) -> list: ...


@contextlib.contextmanager
def sending_alongside(ep: _Endpoint, frame: bytes) -> Iterator[list[int]]:
    """Send ``frame`` from ``ep`` in a loop on a thread for the ``with`` block, reading what
    comes back (1 ms per wait); yields a one-element list holding the number of answers so far.
    The thread ends when the block does; ``ep`` stays open (its owner closes it)."""
    stop = threading.Event()
    answered = [0]

    def loop() -> None:
        while not stop.is_set():
            ep.send_many([frame])
            answered[0] += len(ep.recv_many(0.001))

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    try:
        yield answered
    finally:
        stop.set()
        th.join(5)
