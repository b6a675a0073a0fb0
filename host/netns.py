"""Run Python code inside another network namespace (a Mininet node, an ``ip netns``).

Sockets keep the namespace they were created in, so a socket opened by :func:`in_netns` can be
used from any thread afterwards: that is how one process talks to the interfaces of many
Mininet hosts.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


def netns_path(ns: str | int) -> str:
    """``/var/run/netns/NAME`` for a name, ``/proc/PID/ns/net`` for a process id."""
    if isinstance(ns, int):
        return f"/proc/{ns}/ns/net"
    return ns if ns.startswith("/") else f"/var/run/netns/{ns}"


def in_netns(ns: str | int | None, fn: Callable[[], T]) -> T:
    """Run ``fn()`` in a fresh thread that joined namespace ``ns``; return its value.

    ``ns`` is an ``ip netns`` name, a path, or the PID of a process in the namespace
    (a Mininet node's shell); None runs ``fn`` here.
    """
    if ns is None:
        return fn()
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    out: dict = {}

    def target() -> None:
        try:
            fd = os.open(netns_path(ns), os.O_RDONLY)
        except OSError as exc:
            out["err"] = exc
            return
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                out["err"] = OSError(ctypes.get_errno(), f"setns({ns})")
                return
            out["val"] = fn()
        except BaseException as exc:  # re-raised in the caller
            out["err"] = exc
        finally:
            os.close(fd)

    t = threading.Thread(target=target, name=f"netns-{ns}")
    t.start()
    t.join()
    if "err" in out:
        raise out["err"]
    return out["val"]
