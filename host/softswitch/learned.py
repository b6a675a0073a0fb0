"""The UDP reply ports the software switch learned: (job, sender IPv4 address) -> UDP port.

One table in two numpy arrays, read and written by the Python loop
(:class:`host.softswitch.switch.SoftSwitch`) and by the C switch loop
(``host/softswitch/_swloop.c``) alike, so that both see every port learned, live. It holds
only senders of validated datagrams (issue 16, H1 and R1); at most ``capacity`` of them (a
guard: it is emptied when a new one would not fit).

Keyed by job and address, not address alone: two jobs with members on one host (one IPv4
address, two UDP ports) each get their results at their own port; keyed by address, the
valid packets of one job redirected the other's results to its port (issue 33, item 3). A
key is ``job_id << 32 | address`` (:func:`key`)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def key(job_id: int, addr: int) -> int:
    """The table's key of a sender: its job id and IPv4 address (int)."""
    return (job_id << 32) | addr


class LearnedPorts:
    """A small mapping of (job, IPv4 address) keys (:func:`key`) to UDP ports over numpy
    arrays.

    Parameters
    ----------
    capacity : int
        Most entries held.
    """

    def __init__(self, capacity: int) -> None:
        self.addr = np.zeros(capacity, dtype=np.uint64)   # keys
        self.port = np.zeros(capacity, dtype=np.int64)
        #: entries in use (one element, so that C can update it in place)
        self.count = np.zeros(1, dtype=np.int64)

    def _find(self, addr: int) -> int:
        hit = np.flatnonzero(self.addr[: int(self.count[0])] == addr)
        return int(hit[0]) if hit.size else -1

    def get(self, addr: int, default: int | None = None) -> int | None:
        """The port learned for key ``addr``, else ``default``."""
        k = self._find(addr)
        return int(self.port[k]) if k >= 0 else default

    def __getitem__(self, addr: int) -> int:
        k = self._find(addr)
        if k < 0:
            raise KeyError(addr)
        return int(self.port[k])

    def __setitem__(self, addr: int, port: int) -> None:
        k = self._find(addr)
        if k < 0:
            k = int(self.count[0])
            if k >= len(self.addr):   # the guard: start again
                self.clear()
                return
            self.addr[k] = addr
            self.count[0] = k + 1
        self.port[k] = port

    def __contains__(self, addr: object) -> bool:
        return isinstance(addr, int) and self._find(addr) >= 0

    def __len__(self) -> int:
        return int(self.count[0])

    def __iter__(self) -> Iterator[int]:
        return iter(self.addr[: len(self)].tolist())

    def items(self) -> list[tuple[int, int]]:
        """(address, port) pairs."""
        n = len(self)
        return list(zip(self.addr[:n].tolist(), self.port[:n].tolist(), strict=True))

    def clear(self) -> None:
        """Forget every entry."""
        self.count[0] = 0
