"""Batched packet I/O for the software target: ``recvmmsg``/``sendmmsg`` through ctypes.

Python's ``socket`` has no ``recvmmsg``; calling libc's directly on preallocated buffers moves a
whole batch per system call. The message headers, I/O vectors and socket addresses live in
numpy structured arrays so that lengths and addresses of a batch are read and written as
columns, not per packet.

Three port kinds carry a switch port (``docs/softswitch.md``):

``afpacket`` (:class:`AfPacketPort`)
    raw Ethernet frames on a named interface (veth in a namespace, Mininet); needs root.
``udp`` (:class:`UdpPort`)
    THC messages as UDP datagrams on a bound address, no root. The switch synthesizes the
    Ethernet/IPv4/UDP header of each datagram from its source address (so the sender check
    sees the sender's IPv4 address) and sends what egresses the port to the frame's IPv4
    destination, at the UDP port learned from that address (else :data:`THC_UDP_PORT`), or to
    a fixed ``peer`` (done per batch in :class:`host.softswitch.switch.SoftSwitch`).
``tunnel`` (:class:`TunnelPort`)
    whole Ethernet frames inside UDP datagrams between two fixed addresses: raw-frame tests
    and links between software switches without root.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import os
import socket

import numpy as np

from host.softswitch.pipeline import ROW, THC_OFF

_libc = ctypes.CDLL(None, use_errno=True)
_recvmmsg = _libc.recvmmsg
_recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
_recvmmsg.restype = ctypes.c_int
_sendmmsg = _libc.sendmmsg
_sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
_sendmmsg.restype = ctypes.c_int

MSG_DONTWAIT = 0x40
SO_TIMESTAMPNS = 35           # receive time of each datagram/frame as a control message
CTRL = 32                     # CMSG_SPACE(sizeof(struct timespec)) on LP64
ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23

#: struct mmsghdr on LP64 Linux (struct msghdr + unsigned int msg_len)
MMSG = np.dtype({"names": ["name", "namelen", "iov", "iovlen", "control", "controllen", "flags", "len"],
                 "formats": ["u8", "u4", "u8", "u8", "u8", "u8", "i4", "u4"],
                 "offsets": [0, 8, 16, 24, 32, 40, 48, 56], "itemsize": 64})
IOVEC = np.dtype({"names": ["base", "len"], "formats": ["u8", "u8"], "offsets": [0, 8], "itemsize": 16})
#: struct sockaddr_in
SOCKADDR_IN = np.dtype({"names": ["family", "port", "addr"], "formats": ["<u2", ">u2", ">u4"],
                        "offsets": [0, 2, 4], "itemsize": 16})


class MsgBatch:
    """``capacity`` message slots over the rows of a ``(capacity, ROW)`` byte buffer."""

    def __init__(self, capacity: int, buf: np.ndarray | None = None) -> None:
        self.capacity = capacity
        self.buf = buf if buf is not None else np.zeros((capacity, ROW), dtype=np.uint8)
        self.hdr = np.zeros(capacity, dtype=MMSG)
        self.iov = np.zeros(capacity, dtype=IOVEC)
        self.names = np.zeros(capacity, dtype=SOCKADDR_IN)
        self.ctrl = np.zeros((capacity, CTRL), dtype=np.uint8)
        self.hdr["control"] = self.ctrl.ctypes.data + CTRL * np.arange(capacity, dtype=np.uint64)
        self.rows = self.buf.ctypes.data + ROW * np.arange(capacity, dtype=np.uint64)
        self.hdr["iov"] = self.iov.ctypes.data + IOVEC.itemsize * np.arange(capacity, dtype=np.uint64)
        self.hdr["iovlen"] = 1
        self.name_ptr = self.names.ctypes.data + SOCKADDR_IN.itemsize * np.arange(capacity, dtype=np.uint64)
        self.iov["base"] = self.rows
        self.iov["len"] = ROW
        #: messages the kernel refused to send (skipped; see :meth:`send`)
        self.refused = 0
        #: errno of the last refused message
        self.last_error = 0

    def rebind(self, buf: np.ndarray) -> None:
        """Point the I/O vectors at a new buffer of the same shape."""
        self.buf = buf
        self.rows = buf.ctypes.data + ROW * np.arange(self.capacity, dtype=np.uint64)

    def prepare(self, offset: int, named: bool) -> None:
        """Point every row's vector at byte ``offset`` (and its address slot when ``named``)
        once, for :meth:`recv_prepared`."""
        self.iov["base"] = self.rows + offset
        self.iov["len"] = ROW - offset
        self.hdr["name"] = self.name_ptr if named else 0
        self.hdr["namelen"] = SOCKADDR_IN.itemsize if named else 0

    def reset(self, count: int, named: bool) -> None:
        """Reset the value-result lengths of the first ``count`` messages before receiving."""
        if named:
            self.hdr["namelen"][:count] = SOCKADDR_IN.itemsize
        self.hdr["controllen"][:count] = CTRL

    def recv_prepared(self, fd: int, start: int, count: int) -> int:
        """:meth:`recv` on vectors set by :meth:`prepare` and :meth:`reset`."""
        k = _recvmmsg(fd, self.hdr.ctypes.data + MMSG.itemsize * start, count, MSG_DONTWAIT, None)
        if k < 0:
            e = ctypes.get_errno()
            if e in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                return 0
            raise OSError(e, os.strerror(e))
        return k

    def recv(self, fd: int, start: int, count: int, offset: int, named: bool) -> int:
        """Receive up to ``count`` datagrams/frames into rows ``start..`` at byte ``offset``.

        Returns the number received (0 when nothing is waiting).
        """
        sl = slice(start, start + count)
        self.iov["base"][sl] = self.rows[sl] + offset
        self.iov["len"][sl] = ROW - offset
        if named:
            self.hdr["name"][sl] = self.name_ptr[sl]
            self.hdr["namelen"][sl] = SOCKADDR_IN.itemsize
        else:
            self.hdr["name"][sl] = 0
            self.hdr["namelen"][sl] = 0
        self.hdr["controllen"][sl] = CTRL
        return self.recv_prepared(fd, start, count)

    def stamps(self, start: int, k: int) -> np.ndarray:
        """Kernel receive times (ns) of messages ``start..start+k`` (0 where none came)."""
        c = self.ctrl[start: start + k]
        t = c[:, 16:32].copy().view(np.int64)
        ok = (self.hdr["controllen"][start: start + k] >= CTRL)
        return np.where(ok, t[:, 0] * 1_000_000_000 + t[:, 1], 0)

    def send(self, fd: int, start: int, count: int) -> int:
        """Send messages ``start..start+count`` (headers prepared by the caller); returns how
        many left. A message the kernel refuses (``sendmmsg`` fails on it: an unreachable or
        invalid destination, EINVAL, EACCES, ...) is skipped and counted in :attr:`refused`;
        its neighbours are still sent (issue 16, C2)."""
        sent = done = 0
        while done < count:
            k = _sendmmsg(fd, self.hdr.ctypes.data + MMSG.itemsize * (start + done), count - done, 0)
            if k < 0:
                e = ctypes.get_errno()
                if e == errno.EINTR:
                    continue
                if e in (errno.EAGAIN, errno.ENOBUFS, errno.ECONNREFUSED):
                    return sent   # the rest is lost, as on a congested link
                # sendmmsg fails only on its first message: skip that one
                self.refused += 1
                self.last_error = e
                done += 1
                continue
            sent += k
            done += k
        return sent


SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33


def set_buffers(s: socket.socket, size: int) -> None:
    """Socket buffers of ``size`` bytes: beyond ``net.core.rmem_max`` when root may, else
    as large as the system allows (bursts of a batch window must fit)."""
    for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        try:
            s.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, plain, size)


def _ip(addr: str) -> int:
    return int(ipaddress.IPv4Address(addr))


class Port:
    """A switch port: a socket and how frames map to and from it."""

    kind = "base"
    offset = 0        # where a received message starts in its buffer row
    named = False     # whether receive needs the source address

    def __init__(self, number: int, sock: socket.socket) -> None:
        self.number = number
        self.sock = sock
        self.fd = sock.fileno()
        # arrival times let a batch gathered from several ports be processed in arrival order
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def describe(self) -> str:
        """One line for logs."""
        return f"{self.number}={self.kind}"


class AfPacketPort(Port):
    """Raw frames on interface ``ifname`` (needs CAP_NET_RAW)."""

    kind = "afpacket"

    def __init__(self, number: int, ifname: str, rcvbuf: int = 1 << 23) -> None:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        # (kernels before 4.20 lack it: our own frames then come back and are dropped)
        with contextlib.suppress(OSError):
            s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        set_buffers(s, rcvbuf)
        s.bind((ifname, 0))
        super().__init__(number, s)
        self.ifname = ifname

    def describe(self) -> str:
        return f"{self.number}=afpacket:{self.ifname}"


class UdpPort(Port):
    """THC datagrams on ``bind`` (``ip``, ``port``); see the module docstring."""

    kind = "udp"
    offset = THC_OFF
    named = True

    def __init__(self, number: int, bind: tuple[str, int], peer: tuple[str, int] | None = None,
                 rcvbuf: int = 1 << 23, gro: bool | None = None) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        set_buffers(s, rcvbuf)
        s.bind(bind)
        super().__init__(number, s)
        self.bind = s.getsockname()
        self.peer = peer
        self.peer_addr = _ip(peer[0]) if peer else 0
        #: receive coalesced trains (UDP_GRO) and send runs as UDP_SEGMENT messages
        self.gro: GroBatch | None = None
        self.gso: GsoSender | None = None
        if gro is None:
            gro = gro_enabled_default()
        self.set_gro(gro)

    def set_gro(self, on: bool) -> None:
        """Turn GRO receive and GSO send on or off (the echo loop wants single datagrams)."""
        if on or self.gro is not None:
            self.sock.setsockopt(SOL_UDP, UDP_GRO, 1 if on else 0)
        self.gro = GroBatch() if on else None
        self.gso = GsoSender() if on else None

    def describe(self) -> str:
        peer = f",peer={self.peer[0]}:{self.peer[1]}" if self.peer else ""
        return f"{self.number}=udp:{self.bind[0]}:{self.bind[1]}{peer}"


class TunnelPort(Port):
    """Ethernet frames carried whole in UDP datagrams between ``bind`` and ``peer``."""

    kind = "tunnel"

    def __init__(self, number: int, bind: tuple[str, int], peer: tuple[str, int],
                 rcvbuf: int = 1 << 23) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        set_buffers(s, rcvbuf)
        s.bind(bind)
        s.connect(peer)
        super().__init__(number, s)
        self.bind = s.getsockname()
        self.peer = peer

    def describe(self) -> str:
        return f"{self.number}=tunnel:{self.bind[0]}:{self.bind[1]},peer={self.peer[0]}:{self.peer[1]}"


def _hostport(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{what}: expected IP:PORT, got {text!r}")
    if int(port) > 65535:
        raise ValueError(f"{what}: UDP port {port} is not in 0..65535")
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"{what}: {host!r} is not an IPv4 address") from None
    return host, int(port)


def parse_port(spec: str) -> tuple[int, str, dict]:
    """Parse ``N=afpacket:IFNAME``, ``N=IFNAME``, ``N=udp:IP:PORT[,peer=IP:PORT]`` or
    ``N=tunnel:IP:PORT,peer=IP:PORT`` into (number, kind, options).

    Raises ``ValueError`` naming the problem and the expected form.
    """
    num, sep, rest = spec.partition("=")
    if not sep or not num.isdigit():
        raise ValueError(f"--port {spec!r}: expected N=KIND:..., e.g. 1=udp:127.0.0.1:9001 or 1=veth0")
    n = int(num)
    if not 0 <= n < 511:
        raise ValueError(f"--port {spec!r}: port number must be 0..510 (9-bit port, 511 is drop)")
    head, _, opts = rest.partition(",")
    kw = dict(o.split("=", 1) for o in opts.split(",") if "=" in o)
    kind, sep, addr = head.partition(":")
    if kind == "udp":
        peer = _hostport(kw["peer"], f"--port {spec} peer") if "peer" in kw else None
        return n, "udp", {"bind": _hostport(addr, f"--port {spec}"), "peer": peer}
    if kind == "tunnel":
        if "peer" not in kw:
            raise ValueError(f"--port {spec!r}: a tunnel port needs ,peer=IP:PORT")
        return n, "tunnel", {"bind": _hostport(addr, f"--port {spec}"),
                             "peer": _hostport(kw["peer"], f"--port {spec} peer")}
    if kind == "afpacket":
        return n, "afpacket", {"ifname": addr}
    if sep:
        raise ValueError(f"--port {spec!r}: unknown kind {kind!r} (afpacket, udp, tunnel)")
    return n, "afpacket", {"ifname": head}


def open_port(number: int, kind: str, opts: dict) -> Port:
    """Open the socket of a parsed port."""
    if kind == "udp":
        return UdpPort(number, opts["bind"], opts.get("peer"))
    if kind == "tunnel":
        return TunnelPort(number, opts["bind"], opts["peer"])
    return AfPacketPort(number, opts["ifname"])


# -- UDP GRO receive and GSO send (UDP ports) ------------------------------------------------

SOL_UDP = 17
UDP_SEGMENT = 103
UDP_GRO = 104
#: Datagrams per UDP_SEGMENT message the switch sends (the kernel takes up to 64 per send).
GSO_SEGMENTS = 64
GRO_ROW = 65536               # a coalesced train is at most 64 KB
GRO_CTRL = 64                 # room for SCM_TIMESTAMPNS (32) and UDP_GRO (24)
_GRO_MAX_SEGS = 128           # the most datagrams a train can hold (UDP_MAX_SEGMENTS)


def gro_enabled_default() -> bool:
    """Whether UDP ports use GRO/GSO: on where the kernel has both, off with NETCO_UDP_GSO=0."""
    if os.environ.get("NETCO_UDP_GSO", "1") == "0":
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.setsockopt(SOL_UDP, UDP_GRO, 1)
            s.setsockopt(SOL_UDP, UDP_SEGMENT, 1400)
        except OSError:
            return False
    return True


class GroBatch:
    """Receive coalesced trains (``UDP_GRO``) of one UDP port and split them into the rows of
    the switch's receive batch, one datagram per row, as if ``recvmmsg`` had returned them one
    by one: same bytes, same sender, same receive time."""

    def __init__(self, msgs: int = 16) -> None:
        self.msgs = msgs
        self.buf = np.zeros((msgs, GRO_ROW), dtype=np.uint8)
        self.hdr = np.zeros(msgs, dtype=MMSG)
        self.iov = np.zeros(msgs, dtype=IOVEC)
        self.names = np.zeros(msgs, dtype=SOCKADDR_IN)
        self.ctrl = np.zeros((msgs, GRO_CTRL), dtype=np.uint8)
        self.iov["base"] = self.buf.ctypes.data + GRO_ROW * np.arange(msgs, dtype=np.uint64)
        self.iov["len"] = GRO_ROW
        self.hdr["iov"] = self.iov.ctypes.data + IOVEC.itemsize * np.arange(msgs, dtype=np.uint64)
        self.hdr["iovlen"] = 1
        self.hdr["name"] = self.names.ctypes.data + SOCKADDR_IN.itemsize * np.arange(msgs, dtype=np.uint64)
        self.hdr["control"] = self.ctrl.ctypes.data + GRO_CTRL * np.arange(msgs, dtype=np.uint64)
        #: messages received that held more than one datagram (statistics)
        self.trains = 0

    def recv_into(self, fd: int, rxb: MsgBatch, start: int, room: int, offset: int) -> int:
        """Receive trains while ``room`` rows of ``rxb`` from ``start`` surely hold them; write
        one datagram per row (at byte ``offset``), its length in ``rxb.hdr["len"]``, sender in
        ``rxb.names`` and receive time in ``rxb.ctrl``. Returns the rows written."""
        m = min(self.msgs, room // _GRO_MAX_SEGS)
        if m <= 0:
            return 0
        self.hdr["namelen"][:m] = SOCKADDR_IN.itemsize
        self.hdr["controllen"][:m] = GRO_CTRL
        k = _recvmmsg(fd, self.hdr.ctypes.data, m, MSG_DONTWAIT, None)
        if k < 0:
            e = ctypes.get_errno()
            if e in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                return 0
            raise OSError(e, os.strerror(e))
        row = start
        width = ROW - offset
        lens = self.hdr["len"][:k].tolist()
        clen = self.hdr["controllen"][:k].tolist()
        for j in range(k):
            total = lens[j]
            seg, stamp = _gro_cmsgs(self.ctrl[j], clen[j])
            seg = seg or total or 1
            full = total // seg
            self.trains += total > seg
            tail = total - full * seg
            cut = min(seg, width)
            if full:
                rxb.buf[row: row + full, offset: offset + cut] = \
                    self.buf[j, : full * seg].reshape(full, seg)[:, :cut]
            nrow = full + (1 if tail or not total else 0)
            if tail:
                rxb.buf[row + full, offset: offset + min(tail, width)] = \
                    self.buf[j, full * seg: full * seg + min(tail, width)]
            rows = slice(row, row + nrow)
            rxb.hdr["len"][rows] = cut
            if tail:
                rxb.hdr["len"][row + full] = min(tail, width)
            if not total:
                rxb.hdr["len"][row] = 0
            rxb.names[rows] = self.names[j]
            if stamp is not None:
                rxb.ctrl[rows, 16:32] = stamp
                rxb.hdr["controllen"][rows] = CTRL
            else:
                rxb.hdr["controllen"][rows] = 0
            row += nrow
        return row - start


def _gro_cmsgs(ctrl: np.ndarray, length: int) -> tuple[int, np.ndarray | None]:
    """(UDP_GRO segment size or 0, the SCM_TIMESTAMPNS timespec bytes or None) of one message."""
    seg, stamp, o = 0, None, 0
    raw = ctrl[:length]
    while o + 16 <= length:
        clen = int(raw[o: o + 8].view(np.uint64)[0])
        level = int(raw[o + 8: o + 12].view(np.int32)[0])
        typ = int(raw[o + 12: o + 16].view(np.int32)[0])
        if clen < 16:
            break
        if level == SOL_UDP and typ == UDP_GRO:
            seg = int(raw[o + 16: o + 20].view(np.int32)[0])
        elif level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS:
            stamp = raw[o + 16: o + 32]
        o += (clen + 7) & ~7
    return seg, stamp


class GsoSender:
    """Send a port's run of outgoing datagrams as ``UDP_SEGMENT`` messages: consecutive
    datagrams of one length to one destination go out as one send of up to
    :data:`GSO_SEGMENTS` (the I/O vectors of ``txb`` point at them already; a message takes a
    run of them). The receiver gets the same datagrams (or, with UDP_GRO, the train)."""

    def __init__(self, capacity: int = 1024) -> None:
        self._alloc(capacity)
        #: messages sent that carried more than one datagram (statistics)
        self.trains = 0
        #: set when the route could not segment (EIO/EINVAL: no checksum offload on the
        #: device, a small MTU): the port then sends single datagrams
        self.disabled = False

    def _alloc(self, capacity: int) -> None:
        self.capacity = capacity
        self.hdr = np.zeros(capacity, dtype=MMSG)
        self.ctrl = np.zeros((capacity, 24), dtype=np.uint8)
        c = self.ctrl
        c[:, 0:8] = np.frombuffer(np.uint64(18).tobytes(), dtype=np.uint8)   # CMSG_LEN(2)
        c[:, 8:12] = np.frombuffer(np.int32(SOL_UDP).tobytes(), dtype=np.uint8)
        c[:, 12:16] = np.frombuffer(np.int32(UDP_SEGMENT).tobytes(), dtype=np.uint8)
        self.ctrl_ptr = c.ctypes.data + 24 * np.arange(capacity, dtype=np.uint64)

    def send(self, fd: int, txb: MsgBatch, a: int, e: int) -> int:
        """Send datagrams ``a..e`` of ``txb`` (names and vectors set); returns those sent. A
        message the kernel refuses is skipped and its datagrams counted in ``txb.refused``
        (issue 16, C2), as :meth:`MsgBatch.send` does."""
        n = e - a
        if n > self.capacity:
            self._alloc(max(n, 2 * self.capacity))
        seg = txb.iov["len"][a:e].astype(np.int64)
        names = txb.names[a:e]
        key = (names["addr"].astype(np.int64) << 16) | names["port"]
        brk = np.ones(n, dtype=bool)
        brk[1:] = (key[1:] != key[:-1]) | (seg[1:] != seg[:-1])
        run_start = np.flatnonzero(brk)
        run_id = np.cumsum(brk) - 1
        pos = np.arange(n) - run_start[run_id]
        per = np.maximum(1, np.minimum(GSO_SEGMENTS, 65000 // np.maximum(seg, 1)))
        starts = np.flatnonzero(pos % per == 0)
        m = len(starts)
        counts = np.diff(np.append(starts, n))
        h = self.hdr[:m]
        h["name"] = txb.hdr["name"][a + starts]
        h["namelen"] = txb.hdr["namelen"][a + starts]
        h["iov"] = txb.hdr["iov"][a + starts]
        h["iovlen"] = counts
        multi = counts > 1
        h["control"] = np.where(multi, self.ctrl_ptr[:m], 0)
        h["controllen"] = np.where(multi, 24, 0)
        h["flags"] = 0
        self.ctrl[:m, 16:18] = seg[starts].astype(np.uint16)[:, None].view(np.uint8)
        refused = np.zeros(m, dtype=bool)
        done = 0
        while done < m:
            k = _sendmmsg(fd, self.hdr.ctypes.data + MMSG.itemsize * done, m - done, 0)
            if k < 0:
                err = ctypes.get_errno()
                if err == errno.EINTR:
                    continue
                if err in (errno.EAGAIN, errno.ENOBUFS, errno.ECONNREFUSED):
                    break   # the rest is lost, as on a congested link
                if multi[done] and err in (errno.EIO, errno.EINVAL, errno.EOPNOTSUPP):
                    self.disabled = True
                    first = a + int(starts[done])
                    sent = int(counts[:done][~refused[:done]].sum())
                    self.trains += int(multi[:done][~refused[:done]].sum())
                    return sent + txb.send(fd, first, e - first)
                # sendmmsg fails only on its first message: the kernel refuses that one (its
                # datagrams share one destination); skip it, send the rest (issue 16, C2)
                refused[done] = True
                txb.refused += int(counts[done])
                txb.last_error = err
                done += 1
                continue
            done += k
        ok = ~refused[:done]
        self.trains += int(multi[:done][ok].sum())
        return int(counts[:done][ok].sum())
