"""Endpoints that carry THC datagrams between a worker and its switch.

Two backends with one interface: :class:`UdpEndpoint` (UDP socket, no root; what the software
target listens on) and :class:`RawEndpoint` (AF_PACKET raw Ethernet frames on a named interface,
root; what BMv2 ports and Mininet hosts use). Both batch: :meth:`send_many` writes a list of
datagrams, :meth:`recv_many` waits once and then drains what the socket holds into preallocated
buffers, so the per-packet Python work stays a few attribute lookups.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import struct
from collections.abc import Callable, Sequence
from typing import Protocol

from host.protocol.layout import THC_UDP_PORT

#: Largest THC datagram (header + 256 32-bit lanes) with room to spare.
MAX_DATAGRAM = 2048
ETH_P_IP = 0x0800
SOL_PACKET = 263  # linux/socket.h (not exported by Python's socket module)
PACKET_IGNORE_OUTGOING = 23  # linux/if_packet.h (Linux >= 4.20)
_ETH = 14
_IP = 20
_UDP = 8


class Endpoint(Protocol):
    """What the slot engine needs from a transport (``batch``: most datagrams per receive)."""

    batch: int

    def send_many(self, datagrams: Sequence[bytes | bytearray | memoryview]) -> None: ...

    def recv_many(self, timeout: float) -> list[memoryview]: ...

    def close(self) -> None: ...


def _send_retrying(sock: socket.socket, send: Callable[[], object]) -> None:
    """Call ``send()`` until the kernel takes the datagram (full buffer, ENOBUFS: wait)."""
    while True:
        try:
            send()
            return
        except (BlockingIOError, InterruptedError):
            select.select([], [sock], [], 0.01)
        except OSError as exc:
            if exc.errno != errno.ENOBUFS:
                raise
            select.select([], [sock], [], 0.001)


class _Batcher:
    """Preallocated receive buffers reused batch after batch."""

    def __init__(self, batch: int) -> None:
        self.bufs = [bytearray(MAX_DATAGRAM) for _ in range(batch)]
        self.views = [memoryview(b) for b in self.bufs]


class UdpEndpoint:
    """THC over UDP: datagrams to the switch's THC port, results back to our socket.

    Parameters
    ----------
    switch : (host, port)
        Where the switch (software target) listens for this worker.
    bind : (host, port)
        Local address; port 0 picks a free one (see :attr:`address`).
    batch : int
        Datagrams drained per :meth:`recv_many`.
    """

    def __init__(self, switch: tuple[str, int], bind: tuple[str, int] = ("127.0.0.1", 0),
                 batch: int = 256, bufsize: int = 8 << 20) -> None:
        self.switch = switch
        self.batch = batch
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            self.sock.setsockopt(socket.SOL_SOCKET, opt, bufsize)
        self.sock.bind(bind)
        self.sock.setblocking(False)
        self._b = _Batcher(batch)
        self._poll = select.poll()
        self._poll.register(self.sock, select.POLLIN)

    @property
    def address(self) -> tuple[str, int]:
        """The bound local (host, port)."""
        return self.sock.getsockname()

    def send_many(self, datagrams: Sequence[bytes | bytearray | memoryview]) -> None:
        sendto = self.sock.sendto
        dst = self.switch
        for d in datagrams:
            _send_retrying(self.sock, lambda d=d: sendto(d, dst))

    def recv_many(self, timeout: float) -> list[memoryview]:
        if not self._poll.poll(max(0, int(timeout * 1000))):
            return []
        out = []
        recv_into = self.sock.recv_into
        for view in self._b.views:
            try:
                n = recv_into(view)
            except (BlockingIOError, InterruptedError):
                break
            out.append(view[:n])
        return out

    def close(self) -> None:
        self.sock.close()


def _ip_checksum(hdr: bytes) -> int:
    s = sum(struct.unpack("!10H", hdr))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def mac_bytes(mac: str) -> bytes:
    """``"02:00:00:00:00:01"`` → 6 bytes."""
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"bad MAC address {mac!r}")
    return bytes(int(p, 16) for p in parts)


class RawEndpoint:
    """THC in raw Ethernet/IPv4/UDP frames on interface ``ifname`` (AF_PACKET; needs root).

    Frames are built from a per-length template (fixed IPv4 id, so the header checksum is
    computed once per length; UDP checksum 0, allowed for IPv4). Received frames are kept when
    they are IPv4/UDP to the THC port and addressed to ``src_ip``.
    """

    def __init__(self, ifname: str, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str,
                 batch: int = 256, bufsize: int = 8 << 20) -> None:
        self.ifname = ifname
        self.batch = batch
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            self.sock.setsockopt(socket.SOL_SOCKET, opt, bufsize)
        # Older kernels lack the option: outgoing copies are then filtered by address below.
        with contextlib.suppress(OSError):
            self.sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        self.sock.bind((ifname, ETH_P_IP))
        self.sock.setblocking(False)
        self._eth = mac_bytes(dst_mac) + mac_bytes(src_mac) + struct.pack("!H", ETH_P_IP)
        self._src = socket.inet_aton(src_ip)
        self._dst = socket.inet_aton(dst_ip)
        self._templates: dict[int, bytes] = {}
        self._b = _Batcher(batch)
        self._poll = select.poll()
        self._poll.register(self.sock, select.POLLIN)

    def _prefix(self, n: int) -> bytes:
        t = self._templates.get(n)
        if t is None:
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, _IP + _UDP + n, 0, 0x4000, 64, 17, 0,
                             self._src, self._dst)
            ip = ip[:10] + struct.pack("!H", _ip_checksum(ip)) + ip[12:]
            udp = struct.pack("!HHHH", THC_UDP_PORT, THC_UDP_PORT, _UDP + n, 0)
            t = self._eth + ip + udp
            self._templates[n] = t
        return t

    def send_many(self, datagrams: Sequence[bytes | bytearray | memoryview]) -> None:
        send = self.sock.send
        for d in datagrams:
            frame = self._prefix(len(d)) + bytes(d)
            _send_retrying(self.sock, lambda frame=frame: send(frame))

    def recv_many(self, timeout: float) -> list[memoryview]:
        if not self._poll.poll(max(0, int(timeout * 1000))):
            return []
        out = []
        recv_into = self.sock.recv_into
        port = struct.pack("!H", THC_UDP_PORT)
        me = self._src
        for view, buf in zip(self._b.views, self._b.bufs, strict=True):
            try:
                n = recv_into(view)
            except (BlockingIOError, InterruptedError):
                break
            if (n < _ETH + _IP + _UDP or buf[12:14] != b"\x08\x00" or buf[14] != 0x45
                    or buf[23] != 17 or buf[36:38] != port or buf[30:34] != me):
                continue
            udp_len = (buf[38] << 8) | buf[39]
            out.append(view[_ETH + _IP + _UDP : _ETH + _IP + udp_len])
        return out

    def close(self) -> None:
        self.sock.close()
