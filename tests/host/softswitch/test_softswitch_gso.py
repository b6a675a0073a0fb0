"""UDP GRO receive and GSO send of the software target's UDP ports (``netio.GroBatch``,
``netio.GsoSender``): a coalesced train becomes one row per datagram, as ``recvmmsg`` would
have returned them; runs of outgoing rows leave as ``UDP_SEGMENT`` messages and arrive as the
same datagrams, in order. No root."""

from __future__ import annotations

import errno
import socket
import time

import numpy as np
import pytest

from host.softswitch.netio import (
    SOCKADDR_IN,
    GsoSender,
    MsgBatch,
    UdpPort,
    gro_enabled_default,
)
from host.softswitch.pipeline import ROW, THC_OFF

pytestmark = pytest.mark.skipif(not gro_enabled_default(), reason="kernel without UDP GSO/GRO")

SOL_UDP, UDP_SEGMENT = 17, 103


def _wait_readable(sock: socket.socket) -> None:
    import select

    assert select.select([sock], [], [], 3.0)[0], "nothing arrived"


def test_a_train_becomes_one_row_per_datagram():
    port = UdpPort(1, ("127.0.0.1", 0), gro=True)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.23", 0))
    try:
        rng = np.random.default_rng(1)
        body = rng.integers(0, 256, 4 * 100 + 37, dtype=np.uint8).tobytes()   # 4 full + a tail
        tx.setsockopt(SOL_UDP, UDP_SEGMENT, 100)
        tx.sendto(body, port.bind)
        _wait_readable(port.sock)
        rxb = MsgBatch(1024)
        rxb.reset(1024, True)
        k = port.gro.recv_into(port.fd, rxb, 3, 1021, THC_OFF)
        assert k == 5
        assert port.gro.trains == 1          # it did arrive as one train
        lens = rxb.hdr["len"][3:8].tolist()
        assert lens == [100, 100, 100, 100, 37]
        for i in range(5):
            got = rxb.buf[3 + i, THC_OFF: THC_OFF + lens[i]].tobytes()
            assert got == body[100 * i: 100 * i + lens[i]]
        names = rxb.names[3:8]
        assert (names["addr"] == int.from_bytes(socket.inet_aton("127.0.0.23"), "big")).all()
        assert (names["port"] == tx.getsockname()[1]).all()
        assert (rxb.stamps(3, 5) > 0).all()   # receive time kept for arrival order
        # no room for a worst-case train: nothing is taken (it waits for the next batch)
        tx.sendto(body, port.bind)
        _wait_readable(port.sock)
        assert port.gro.recv_into(port.fd, rxb, 1000, 24, THC_OFF) == 0
        assert port.gro.recv_into(port.fd, rxb, 0, 1024, THC_OFF) == 5
    finally:
        tx.close()
        port.close()


def test_plain_datagrams_pass_a_gro_port_unchanged():
    port = UdpPort(1, ("127.0.0.1", 0), gro=True)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sent = [bytes([i]) * (10 + i) for i in range(6)]
        for d in sent:
            tx.sendto(d, port.bind)
        time.sleep(0.05)
        rxb = MsgBatch(1024)
        rxb.reset(1024, True)
        k = port.gro.recv_into(port.fd, rxb, 0, 1024, THC_OFF)
        got = [rxb.buf[i, THC_OFF: THC_OFF + rxb.hdr["len"][i]].tobytes() for i in range(k)]
        assert got == sent
        assert port.gro.trains == 0
    finally:
        tx.close()
        port.close()


def test_gso_sender_sends_the_same_datagrams_in_order():
    dst = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
    src = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for s in dst:
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
        # rows: 70 of 100 B to dst0 (two messages: 64 + 6), 3 of 50 B to dst0, 1 to dst1
        rng = np.random.default_rng(2)
        plan = [(0, 100)] * 70 + [(0, 50)] * 3 + [(1, 80)]
        n = len(plan)
        txb = MsgBatch(n)
        datagrams = []
        for i, (d, size) in enumerate(plan):
            body = rng.integers(0, 256, size, dtype=np.uint8)
            txb.buf[i, THC_OFF: THC_OFF + size] = body
            datagrams.append((d, body.tobytes()))
        txb.iov["base"][:n] = txb.rows[:n] + THC_OFF
        txb.iov["len"][:n] = [size for _, size in plan]
        names = txb.names[:n]
        names["family"] = socket.AF_INET
        names["addr"] = int.from_bytes(socket.inet_aton("127.0.0.1"), "big")
        names["port"] = [dst[d].getsockname()[1] for d, _ in plan]
        txb.hdr["name"][:n] = txb.name_ptr[:n]
        txb.hdr["namelen"][:n] = SOCKADDR_IN.itemsize
        gso = GsoSender(16)             # grows to the run
        assert gso.send(src.fileno(), txb, 0, n) == n
        assert gso.trains == 3          # 64 + 6 of 100 B, 3 of 50 B; the single one goes plain
        time.sleep(0.05)
        for d in range(2):
            got = []
            while True:
                try:
                    got.append(dst[d].recv(ROW))
                except BlockingIOError:
                    break
            assert got == [b for dd, b in datagrams if dd == d]
    finally:
        src.close()
        for s in dst:
            s.close()


def _batch_to(plan: list[tuple[str, int]]) -> tuple[MsgBatch, list[bytes]]:
    """A send batch of one 60-byte datagram (byte i, 60 times) per (address, port) of ``plan``."""
    n = len(plan)
    txb = MsgBatch(n)
    bodies = [bytes([i]) * 60 for i in range(n)]
    for i, b in enumerate(bodies):
        txb.buf[i, THC_OFF: THC_OFF + 60] = np.frombuffer(b, dtype=np.uint8)
    txb.iov["base"][:n] = txb.rows[:n] + THC_OFF
    txb.iov["len"][:n] = 60
    names = txb.names[:n]
    names["family"] = socket.AF_INET
    names["addr"] = [int.from_bytes(socket.inet_aton(a), "big") for a, _ in plan]
    names["port"] = [p for _, p in plan]
    txb.hdr["name"][:n] = txb.name_ptr[:n]
    txb.hdr["namelen"][:n] = SOCKADDR_IN.itemsize
    txb.hdr["controllen"][:n] = 0
    return txb, bodies


def _received(dst: socket.socket) -> list[bytes]:
    """The datagrams waiting at non-blocking ``dst`` 50 ms from now."""
    time.sleep(0.05)
    got = []
    while True:
        try:
            got.append(dst.recv(ROW))
        except BlockingIOError:
            return got


def test_gso_sender_falls_back_to_single_datagrams_where_the_route_cannot_segment():
    """UDP-Lite refuses UDP_SEGMENT with EIO, as a device without checksum offload does:
    the run still leaves whole, one datagram per message, and the sender stays plain."""
    try:
        src = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136)   # IPPROTO_UDPLITE
        dst = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136)
    except OSError:
        pytest.skip("no UDP-Lite in this kernel")
    try:
        dst.bind(("127.0.0.1", 0))
        dst.setblocking(False)
        n = 10
        txb, bodies = _batch_to([("127.0.0.1", dst.getsockname()[1])] * n)
        gso = GsoSender()
        assert gso.send(src.fileno(), txb, 0, n) == n
        assert gso.disabled and gso.trains == 0
        assert _received(dst) == bodies
    finally:
        src.close()
        dst.close()


def test_gso_sender_skips_a_refused_train_and_sends_the_rest():
    """Issue 16, C2 with trains: a UDP_SEGMENT message the kernel refuses (broadcast without
    SO_BROADCAST: EACCES) is skipped, each of its datagrams counted in ``txb.refused``; the
    next run still leaves as a train and the sender stays on GSO."""
    src = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dst = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        dst.bind(("127.0.0.1", 0))
        dst.setblocking(False)
        plan = [("255.255.255.255", 9)] * 3 + [("127.0.0.1", dst.getsockname()[1])] * 4
        n = len(plan)
        txb, bodies = _batch_to(plan)
        gso = GsoSender()
        assert gso.send(src.fileno(), txb, 0, n) == 4
        assert txb.refused == 3 and txb.last_error == errno.EACCES
        assert not gso.disabled and gso.trains == 1
        assert _received(dst) == bodies[3:]
    finally:
        src.close()
        dst.close()
