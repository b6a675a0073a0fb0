"""Endpoints that carry THC datagrams between a worker and its switch.

Two backends with one interface: :class:`UdpEndpoint` (UDP socket, no root; what the software
target listens on) and :class:`RawEndpoint` (AF_PACKET raw Ethernet frames on a named interface,
root; what BMv2 ports and Mininet hosts use). Both batch: :meth:`send_many` writes a list of
datagrams with ``sendmmsg`` (one system call per up to ``batch`` datagrams), :meth:`recv_many`
drains what the socket holds with ``recvmmsg`` into one preallocated buffer and polls only when
nothing is waiting, so the per-packet Python work stays a slice copy or view. Both calls go
through ctypes (Python's ``socket`` has neither); without them (not Linux, ``mmsg=False``) the
endpoints fall back to one ``sendto``/``recv_into`` per datagram.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import math
import os
import select
import socket
import struct
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from host.protocol import framing as fr
from host.protocol.layout import THC_UDP_PORT

MAX_DATAGRAM = fr.MAX_DATAGRAM
ETH_P_IP = fr.ETHERTYPE_IPV4
SOL_PACKET = 263  # linux/socket.h (not exported by Python's socket module)
PACKET_IGNORE_OUTGOING = 23  # linux/if_packet.h (Linux >= 4.20)
UDP_SEGMENT, UDP_GRO = 103, 104  # linux/udp.h (Linux >= 4.18 / 5.0)

#: Datagrams per UDP_SEGMENT message of the C slot loop over UDP (``UdpEndpoint.gso``): the
#: kernel segments one send into up to this many datagrams and, on loopback or a veth whose
#: receiver set UDP_GRO, hands the train to the receiving socket in one piece. The wire
#: carries the same datagrams either way. ``NETCO_UDP_GSO=0`` (read when an endpoint is made)
#: turns it off — e.g. for a packet capture on ``lo``, which shows a train as one packet.
UDP_GSO_SEGMENTS = 64


def udp_gso_supported() -> bool:
    """Whether this kernel has UDP GSO and GRO (``UDP_SEGMENT``/``UDP_GRO``, Linux >= 5.0)."""
    if not sys.platform.startswith("linux"):
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, 1400)
            s.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
        except OSError:
            return False
    return True


_GSO_OK: bool | None = None


def _gso_default() -> int:
    global _GSO_OK
    if UDP_GSO_SEGMENTS <= 1 or os.environ.get("NETCO_UDP_GSO", "1") == "0":
        return 0
    if _GSO_OK is None:
        _GSO_OK = udp_gso_supported()
    return UDP_GSO_SEGMENTS if _GSO_OK else 0


#: Ethernet type, IPv4 version/IHL, protocol, source and destination address, UDP source and
#: destination port and length of an Ethernet/IPv4/UDP frame (what a received frame is filtered
#: on: THC to us, from the switch).
_FRAME = fr.frame_struct(("ethertype", "verihl", "proto", "src", "dst", "sport", "dport",
                          "udp_len"))


class Endpoint(Protocol):
    """What the slot engine needs from a transport (``batch``: most datagrams per receive).

    ``foreign``: datagrams dropped because they did not come from the switch (counted; only
    what the switch sends is ever handed to the slot window).
    """

    batch: int
    foreign: int

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


def _poll_ms(timeout: float) -> int:
    """``poll`` milliseconds for ``timeout`` seconds, rounded up: a wait of 0.3 ms must sleep,
    not spin (the workers share the cores with the switch)."""
    return max(0, math.ceil(timeout * 1000))


def _recv_waiting(rx: _MsgRing, sock: socket.socket, poll: select.poll, timeout: float) -> int:
    """Messages received into ``rx``: those already waiting (no poll), else those that come
    within ``timeout`` seconds; 0 when none did."""
    k = rx.recv(sock)
    if k == 0 and poll.poll(_poll_ms(timeout)):
        k = rx.recv(sock)
    return k


# -- sendmmsg / recvmmsg through ctypes (Linux, LP64) --------------------------------------
#: struct mmsghdr (struct msghdr + unsigned int msg_len) and struct iovec on LP64 Linux
_MMSG = np.dtype({"names": ["name", "namelen", "iov", "iovlen", "control", "controllen", "flags",
                            "len"],
                  "formats": ["u8", "u4", "u8", "u8", "u8", "u8", "i4", "u4"],
                  "offsets": [0, 8, 16, 24, 32, 40, 48, 56], "itemsize": 64})
_IOVEC = np.dtype({"names": ["base", "len"], "formats": ["u8", "u8"], "offsets": [0, 8],
                   "itemsize": 16})
_MSG_DONTWAIT = 0x40
#: struct sockaddr_in (family, port, address; network order where the kernel keeps it)
_SOCKADDR_IN = np.dtype({"names": ["family", "port", "addr"], "formats": ["<u2", ">u2", ">u4"],
                         "offsets": [0, 2, 4], "itemsize": 16})


def _load_mmsg() -> tuple[Callable[..., int], Callable[..., int]] | None:
    if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        send, recv = libc.sendmmsg, libc.recvmmsg
    except (OSError, AttributeError):
        return None
    send.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
    send.restype = ctypes.c_int
    recv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
    recv.restype = ctypes.c_int
    return send, recv


_MMSG_CALLS = _load_mmsg()
#: Whether the endpoints batch system calls with sendmmsg/recvmmsg (else one call a datagram).
HAVE_MMSG = _MMSG_CALLS is not None


class _MsgRing:
    """``capacity`` message slots of ``size`` bytes in one buffer, for sendmmsg/recvmmsg.

    The message headers and I/O vectors are numpy structured arrays pointing into the buffer
    once; per datagram the Python work is one slice copy (send) or one slice view (receive).
    ``name``: a ``struct sockaddr`` every message is sent to (None: connected or raw socket).
    """

    def __init__(self, capacity: int, size: int, name: bytes | None = None,
                 sources: bool = False) -> None:
        self.capacity, self.size = capacity, size
        self.buf = np.zeros(capacity * size, dtype=np.uint8)
        self.mv = memoryview(self.buf)
        idx = np.arange(capacity, dtype=np.uint64)
        self.iov = np.zeros(capacity, dtype=_IOVEC)
        self.iov["base"] = self.buf.ctypes.data + size * idx
        self.iov["len"] = size
        self.iov_len = self.iov["len"]
        self.lens = [size] * capacity  # what iov_len holds, to write only changes
        self.hdr = np.zeros(capacity, dtype=_MMSG)
        self.hdr["iov"] = self.iov.ctypes.data + _IOVEC.itemsize * idx
        self.hdr["iovlen"] = 1
        self.msg_len = self.hdr["len"]
        self._name = None
        if name is not None:
            self._name = np.frombuffer(name, dtype=np.uint8).copy()
            self.hdr["name"] = self._name.ctypes.data
            self.hdr["namelen"] = len(name)
        #: receive rings: each message's source address (``struct sockaddr_in``)
        self.sources = None
        if sources:
            self.sources = np.zeros(capacity, dtype=_SOCKADDR_IN)
            self.hdr["name"] = self.sources.ctypes.data + _SOCKADDR_IN.itemsize * idx
            self.namelen = self.hdr["namelen"]
        self.addr = self.hdr.ctypes.data

    def send(self, sock: socket.socket, datagrams: Sequence[bytes | bytearray | memoryview],
             prefix: Callable[[int], bytes] | None = None) -> None:
        """Send all ``datagrams`` (each behind ``prefix(len)`` when given), waiting on a full
        buffer like :func:`_send_retrying`; never drops one."""
        assert _MMSG_CALLS is not None
        sendmmsg = _MMSG_CALLS[0]
        fd, mv, size, lens, cap = sock.fileno(), self.mv, self.size, self.lens, self.capacity
        for start in range(0, len(datagrams), cap):
            chunk = datagrams[start : start + cap]
            off = 0
            for j, d in enumerate(chunk):
                n = len(d)
                if prefix is not None:
                    p = prefix(n)
                    mv[off : off + len(p)] = p
                    mv[off + len(p) : off + len(p) + n] = d
                    n += len(p)
                else:
                    mv[off : off + n] = d
                if lens[j] != n:
                    self.iov_len[j] = lens[j] = n
                off += size
            k, count = 0, len(chunk)
            while k < count:
                r = sendmmsg(fd, self.addr + _MMSG.itemsize * k, count - k, 0)
                if r >= 0:
                    k += r
                    continue
                e = ctypes.get_errno()
                if e in (errno.EAGAIN, errno.EINTR):
                    select.select([], [sock], [], 0.01)
                elif e == errno.ENOBUFS:
                    select.select([], [sock], [], 0.001)
                else:
                    raise OSError(e, os.strerror(e))

    def recv(self, sock: socket.socket) -> int:
        """Receive what is waiting (up to ``capacity``; 0 when nothing), without blocking."""
        assert _MMSG_CALLS is not None
        if self.sources is not None:
            self.namelen[:] = _SOCKADDR_IN.itemsize
        k = _MMSG_CALLS[1](sock.fileno(), self.addr, self.capacity, _MSG_DONTWAIT, None)
        if k >= 0:
            return k
        e = ctypes.get_errno()
        if e in (errno.EAGAIN, errno.EINTR):
            return 0
        raise OSError(e, os.strerror(e))

    def views(self, k: int) -> list[memoryview]:
        """The first ``k`` received messages (valid until the next :meth:`recv`)."""
        mv, size = self.mv, self.size
        return [mv[j * size : j * size + n] for j, n in enumerate(self.msg_len[:k].tolist())]

    def views_from(self, k: int, addr: int, port: int) -> tuple[list[memoryview], int]:
        """:meth:`views` of the messages from IPv4 ``addr``:``port`` only, and how many came
        from elsewhere (needs ``sources``)."""
        assert self.sources is not None
        src = self.sources[:k]
        ok = (src["addr"] == addr) & (src["port"] == port)
        if ok.all():
            return self.views(k), 0
        mv, size = self.mv, self.size
        lens = self.msg_len[:k].tolist()
        keep = np.flatnonzero(ok).tolist()
        return [mv[j * size : j * size + lens[j]] for j in keep], k - len(keep)


class _Batcher:
    """Preallocated receive buffers reused batch after batch (no recvmmsg)."""

    def __init__(self, batch: int) -> None:
        self.bufs = [bytearray(MAX_DATAGRAM) for _ in range(batch)]
        self.views = [memoryview(b) for b in self.bufs]


def _hooked(ep: object) -> bool:
    """Whether ``send_many`` or ``recv_many`` was replaced on the instance."""
    d = getattr(ep, "__dict__", {})
    return "send_many" in d or "recv_many" in d


def _sockaddr_in(host: str, port: int) -> bytes:
    """``struct sockaddr_in`` of an IPv4 (host, port)."""
    return (struct.pack("=H", socket.AF_INET) + struct.pack("!H", port)
            + socket.inet_aton(socket.gethostbyname(host)) + bytes(8))


class UdpEndpoint:
    """THC over UDP: datagrams to the switch's THC port, results back to our socket.

    Parameters
    ----------
    switch : (host, port)
        Where the switch (software target) listens for this worker.
    bind : (host, port)
        Local address; port 0 picks a free one (see :attr:`address`).
    batch : int
        Datagrams drained per :meth:`recv_many` (and sent per system call).
    mmsg : bool
        Batch system calls with ``sendmmsg``/``recvmmsg`` where libc has them (Linux);
        False: one ``sendto``/``recv_into`` per datagram.
    gso : int, optional
        Datagrams per ``UDP_SEGMENT`` message in the C slot loop, results received as
        ``UDP_GRO`` trains (default :data:`UDP_GSO_SEGMENTS` where the kernel has both; 0 off).
    """

    def __init__(self, switch: tuple[str, int], bind: tuple[str, int] = ("127.0.0.1", 0),
                 batch: int = 256, bufsize: int = 8 << 20, mmsg: bool = True,
                 gso: int | None = None) -> None:
        self.switch = switch
        self.batch = batch
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            self.sock.setsockopt(socket.SOL_SOCKET, opt, bufsize)
        self.sock.bind(bind)
        self.sock.setblocking(False)
        self._poll = select.poll()
        self._poll.register(self.sock, select.POLLIN)
        self._tx = self._rx = None
        self._b = None
        self._dest = _sockaddr_in(*switch)
        #: datagrams per UDP_SEGMENT message when the C slot loop drives this socket (0: off)
        self.gso = _gso_default() if gso is None else gso
        # Results are taken from the switch's address and port only (issue 16, S1): anything
        # else is dropped and counted in ``foreign``.
        self._src_addr = int.from_bytes(self._dest[4:8], "big")
        self._src_port = switch[1]
        self.foreign = 0
        if mmsg and HAVE_MMSG:
            self._tx = _MsgRing(batch, MAX_DATAGRAM, self._dest)
            self._rx = _MsgRing(batch, MAX_DATAGRAM, sources=True)
        else:
            self._b = _Batcher(batch)

    @property
    def address(self) -> tuple[str, int]:
        """The bound local (host, port)."""
        return self.sock.getsockname()

    @staticmethod
    def default_gso() -> int:
        """Datagrams per UDP_SEGMENT message a new endpoint uses (0: GSO/GRO off here)."""
        return _gso_default()

    def native(self, size: int) -> tuple | None:
        """What the C slot loop needs to drive this socket itself (``slots._slotloop``):
        (fd, raw=0, destination sockaddr, -, -, THC port, batch, gso); None without sendmmsg or when
        ``send_many``/``recv_many`` were replaced on this object (a test's hook must see every
        datagram)."""
        if self._tx is None or _hooked(self):
            return None
        return (self.sock.fileno(), 0, self._dest, b"", b"", THC_UDP_PORT, self.batch, self.gso)

    def send_many(self, datagrams: Sequence[bytes | bytearray | memoryview]) -> None:
        if self._tx is not None:
            self._tx.send(self.sock, datagrams)
            return
        sendto = self.sock.sendto
        dst = self.switch
        for d in datagrams:
            _send_retrying(self.sock, lambda d=d: sendto(d, dst))

    def recv_many(self, timeout: float) -> list[memoryview]:
        rx = self._rx
        if rx is not None:
            k = _recv_waiting(rx, self.sock, self._poll, timeout)   # 0: no views, none foreign
            views, foreign = rx.views_from(k, self._src_addr, self._src_port)
            self.foreign += foreign
            return views
        if not self._poll.poll(_poll_ms(timeout)):
            return []
        out = []
        recvfrom_into = self.sock.recvfrom_into
        assert self._b is not None
        want = (socket.inet_ntoa(self._dest[4:8]), self._src_port)
        for view in self._b.views:
            try:
                n, src = recvfrom_into(view)
            except (BlockingIOError, InterruptedError):
                break
            if src != want:
                self.foreign += 1
                continue
            out.append(view[:n])
        return out

    def close(self) -> None:
        self.sock.close()


class RawEndpoint:
    """THC in raw Ethernet/IPv4/UDP frames on interface ``ifname`` (AF_PACKET; needs root).

    Frames are built from a per-length template (fixed IPv4 id, so the header checksum is
    computed once per length; UDP checksum 0, allowed for IPv4), from UDP port ``sport`` (the
    job's ``worker_port``, which the switch's sender binding names; THC's port by default) to
    THC's port. Received frames are kept when they are IPv4/UDP to the THC port and addressed
    to ``src_ip``.
    """

    def __init__(self, ifname: str, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str,
                 batch: int = 256, bufsize: int = 8 << 20, mmsg: bool = True,
                 sport: int = THC_UDP_PORT) -> None:
        self.ifname = ifname
        self.sport = sport
        self.batch = batch
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            self.sock.setsockopt(socket.SOL_SOCKET, opt, bufsize)
        # Older kernels lack the option: outgoing copies are then filtered by address below.
        with contextlib.suppress(OSError):
            self.sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        self.sock.bind((ifname, ETH_P_IP))
        self.sock.setblocking(False)
        self._eth = fr.ethernet_header(dst_mac, src_mac)
        self._src = socket.inet_aton(src_ip)
        self._dst = socket.inet_aton(dst_ip)
        #: frames to our address from elsewhere than the switch (``dst_ip``, THC port): dropped
        self.foreign = 0
        self._templates: dict[int, bytes] = {}
        self._poll = select.poll()
        self._poll.register(self.sock, select.POLLIN)
        self._tx = self._rx = None
        self._b = None
        if mmsg and HAVE_MMSG:
            self._tx = _MsgRing(batch, MAX_DATAGRAM + fr.THC_OFFSET)
            self._rx = _MsgRing(batch, MAX_DATAGRAM + fr.THC_OFFSET)
        else:
            self._b = _Batcher(batch)

    def _prefix(self, n: int) -> bytes:
        t = self._templates.get(n)
        if t is None:
            ip = fr.ipv4_header(self._src, self._dst, fr.UDP_HEADER_BYTES + n,
                                frag=fr.IPV4_DONT_FRAGMENT)
            t = self._eth + ip + fr.udp_header(self.sport, THC_UDP_PORT, n)
            self._templates[n] = t
        return t

    def native(self, size: int) -> tuple | None:
        """What the C slot loop needs to drive this socket itself for datagrams of ``size``
        bytes: (fd, raw=1, -, frame prefix, own IPv4 address, THC port, batch, 0); None without
        sendmmsg or with replaced ``send_many``/``recv_many`` (as :meth:`UdpEndpoint.native`)."""
        if self._tx is None or _hooked(self):
            return None
        return (self.sock.fileno(), 1, b"", self._prefix(size), self._src, THC_UDP_PORT,
                self.batch, 0)

    def send_many(self, datagrams: Sequence[bytes | bytearray | memoryview]) -> None:
        if self._tx is not None:
            self._tx.send(self.sock, datagrams, self._prefix)
            return
        send = self.sock.send
        for d in datagrams:
            frame = self._prefix(len(d)) + bytes(d)
            _send_retrying(self.sock, lambda frame=frame: send(frame))

    def recv_many(self, timeout: float) -> list[memoryview]:
        rx = self._rx
        if rx is not None:
            k = _recv_waiting(rx, self.sock, self._poll, timeout)
            if k == 0:
                return []
            frames = rx.views(k)
        else:
            if not self._poll.poll(_poll_ms(timeout)):
                return []
            frames = []
            recv_into = self.sock.recv_into
            assert self._b is not None
            for view in self._b.views:
                try:
                    n = recv_into(view)
                except (BlockingIOError, InterruptedError):
                    break
                frames.append(view[:n])
        out = []
        unpack_from, me, switch = _FRAME.unpack_from, self._src, self._dst
        for f in frames:
            if len(f) < fr.THC_OFFSET:
                continue
            etype, vihl, proto, src, dst, sport, dport, udp_len = unpack_from(f)
            if (etype != ETH_P_IP or vihl != fr.IPV4_VER_IHL or proto != fr.IP_PROTO_UDP
                    or dport != THC_UDP_PORT or dst != me):
                continue
            if src != switch or sport != THC_UDP_PORT:
                self.foreign += 1
                continue
            out.append(f[fr.THC_OFFSET : fr.UDP_OFFSET + udp_len])
        return out

    def close(self) -> None:
        self.sock.close()
