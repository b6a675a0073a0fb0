"""A switch process with mixed port kinds: two UDP worker ports and a tunnel uplink to a
parent switch (played by the test). Partials go up the tunnel as whole frames; the parent's
result comes back down and reaches the workers over UDP at their learned ports."""

from __future__ import annotations

import json
import signal
import socket

import numpy as np
import pytest

from host.protocol import codec
from host.protocol.layout import Flag, MsgType
from host.softswitch.frames import read_frame, thc_frame
from host.softswitch.launch import (
    AsyncLoop,
    connect,
    free_tcp_port,
    free_udp_port,
    p4info_path,
    start_switch_process,
    stop_process,
)
from tests.support.softswitch import C, Peer, job_entities, sums
from tests.support.token import TOKEN

PARENT_IP, SELF_IP = "10.0.9.254", "10.0.1.254"


@pytest.fixture
def leaf(tmp_path):
    udp = [free_udp_port(), free_udp_port()]
    up_sw, up_test = free_udp_port(), free_udp_port()
    ports = {1: f"udp:127.0.0.1:{udp[0]}", 2: f"udp:127.0.0.1:{udp[1]}",
             3: f"tunnel:127.0.0.1:{up_sw},peer=127.0.0.1:{up_test}"}
    grpc_port = free_tcp_port()
    proc = start_switch_process(ports, grpc_port, tmp_path / "leaf.log", extra=("--json",))
    loop = AsyncLoop()
    client = None
    socks = []
    try:
        client = connect(loop, "leaf", grpc_port, p4info_path(tmp_path))
        peers = [Peer(r, r + 1, f"127.0.0.{40 + r}", f"02:00:00:00:00:{r + 1:02x}") for r in range(2)]
        loop.run(client.insert(job_entities(3, peers, lane_bits=16, parent=(3, PARENT_IP),
                                            self_id=5, self_ip=SELF_IP)))
        for p in peers:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((p.ip, 0))
            s.settimeout(3.0)
            socks.append(s)
        uplink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        uplink.bind(("127.0.0.1", up_test))
        uplink.connect(("127.0.0.1", up_sw))
        uplink.settimeout(3.0)
        socks.append(uplink)
        yield proc, udp, socks, tmp_path / "leaf.log"
    finally:
        if client is not None:
            loop.run(client.__aexit__(None, None, None), timeout=10)
        loop.close()
        for s in socks:
            s.close()
        stop_process(proc)


def test_partial_up_the_tunnel_and_result_down_to_udp_workers(leaf):
    proc, udp, (w0, w1, uplink), log = leaf
    rng = np.random.default_rng(4)
    idx = [rng.integers(0, 16, C) for _ in range(2)]
    for r, s in enumerate((w0, w1)):
        h = codec.Header(token=TOKEN, msg_type=MsgType.DATA, job_id=3, slot=2, round=0, rank=r)
        s.sendto(codec.encode(h, idx[r]), ("127.0.0.1", udp[r]))
    _dmac, src, dst, m = read_frame(uplink.recv(4096))     # the partial, as a whole frame
    assert (src, dst, m.header.msg_type, m.header.rank) == (SELF_IP, PARENT_IP, MsgType.PARTIAL, 5)
    assert (m.header.count, m.header.bitmap, m.header.lane_bits) == (2, 0b11, 16)
    np.testing.assert_array_equal(m.values, sums(idx))
    # a worker retransmits while the leaf waits: the partial goes up again, flagged RETX
    h = codec.Header(token=TOKEN, msg_type=MsgType.DATA, job_id=3, slot=2, round=0, rank=0, flags=Flag.RETX)
    w0.sendto(codec.encode(h, idx[0]), ("127.0.0.1", udp[0]))
    assert read_frame(uplink.recv(4096))[3].header.flags == Flag.RETX
    # the parent's result (whole job: 5 workers) comes down the tunnel, fans out over UDP
    total = np.arange(C) * 7
    res = codec.Header(msg_type=MsgType.RESULT, job_id=3, slot=2, round=0, rank=255, lane_bits=16,
                       token=TOKEN, count=5, bitmap=0b11111)
    uplink.send(thc_frame("02:00:00:00:09:fe", PARENT_IP, SELF_IP, res, total))
    for s in (w0, w1):
        got = codec.decode(s.recv(4096))
        assert (got.header.msg_type, got.header.count, got.header.bitmap) == (MsgType.RESULT, 5, 0b11111)
        np.testing.assert_array_equal(got.values, total)
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    stats = json.loads([ln for ln in log.read_text().splitlines() if ln.startswith("{")][-1])
    assert stats["errors"] == 0 and stats["drops"] == {}
    assert stats["outcomes"] == {"contribution": 2, "retx_up": 1, "parent_result": 1}
