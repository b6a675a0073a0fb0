"""Ports a Mininet testbed gives its switch processes (control_plane/testbed/net.py).

A BMv2 switch takes a Thrift port besides its P4Runtime port. Both were picked by binding
port 0 and releasing it, so the kernel could hand a switch's released P4Runtime port out
again as its Thrift port: BMv2 then never opened P4Runtime ("Could not bind: Address already
in use", seen in CI). :func:`free_ports` keeps its picks distinct and off the ports to avoid.
"""

from __future__ import annotations

import socket

from control_plane.testbed.net import free_ports


def _released_port() -> int:
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def test_picks_are_distinct_and_skip_the_ports_to_avoid():
    avoid = {_released_port() for _ in range(16)}
    picks = free_ports(32, avoid=avoid)
    assert len(picks) == 32 and len(set(picks)) == 32
    assert not avoid & set(picks)


def test_a_port_the_kernel_hands_out_again_is_skipped(monkeypatch):
    """Force the reuse that happened in CI: the first port bind(0) gives is the avoided one."""
    real_socket = socket.socket
    first = _released_port()
    given = iter([first])

    class Recycling(real_socket):
        def bind(self, addr):
            if addr == ("127.0.0.1", 0):
                port = next(given, 0)
                return super().bind(("127.0.0.1", port))
            return super().bind(addr)

    monkeypatch.setattr(socket, "socket", Recycling)
    picks = free_ports(2, avoid={first})
    assert first not in picks and len(set(picks)) == 2
