"""Enter a network namespace by path (``/run/netns/NAME`` or ``/proc/PID/ns/net``)."""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNET = 0x40000000


def enter_netns(path: str) -> None:
    """Move the calling thread into the network namespace at ``path``.

    Threads started afterwards inherit it (gloo's do); sockets keep the namespace they were
    opened in. Needs CAP_SYS_ADMIN over the namespace (root, or the root of the user namespace
    that owns it).
    """
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)
