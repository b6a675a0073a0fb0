"""Endpoint batching (sendmmsg/recvmmsg and the per-datagram fallback) and the RTO estimator."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from host.transport.ports import HAVE_MMSG, UdpEndpoint
from host.transport.slots import SlotConfig, SlotWindow

MODES = [pytest.param(True, id="mmsg",
                      marks=pytest.mark.skipif(not HAVE_MMSG, reason="no sendmmsg/recvmmsg")),
         pytest.param(False, id="per-datagram")]


def datagrams(count: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes()
            for n in rng.integers(1, 1100, count)]


def drain(recv_many, want: int, batch: int) -> list[bytes]:
    got: list[bytes] = []
    end = time.monotonic() + 5
    while len(got) < want and time.monotonic() < end:
        views = recv_many(0.05)
        assert len(views) <= batch
        got.extend(bytes(v) for v in views)
    return got


@pytest.mark.parametrize("mmsg", MODES)
def test_udp_endpoint_sends_and_receives_every_datagram_in_order(mmsg):
    """More datagrams than one batch, of many lengths, both ways: nothing lost or altered."""
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    peer.bind(("127.0.0.1", 0))
    peer.settimeout(2)
    ep = UdpEndpoint(peer.getsockname(), batch=64, mmsg=mmsg)
    try:
        out = datagrams(300, 1)
        ep.send_many(out[:150])
        ep.send_many([memoryview(d) for d in out[150:]])  # views are sent like bytes
        assert [peer.recv(2048) for _ in out] == out
        back = datagrams(200, 2)
        for d in back:
            peer.sendto(d, ep.address)
        assert drain(ep.recv_many, len(back), 64) == back
        t0 = time.monotonic()
        assert ep.recv_many(0.0004) == []  # a sub-millisecond wait sleeps (rounded up) ...
        assert time.monotonic() - t0 >= 0.0009  # ... instead of returning at once to spin
    finally:
        ep.close()
        peer.close()


class _Silent:
    batch = 1

    def send_many(self, datagrams) -> None: ...

    def recv_many(self, timeout: float) -> list:
        return []

    def close(self) -> None: ...


def _rtos_on_sawtooth(per_rtt: int) -> tuple[list[float], float]:
    """Feed the RTTs a full window produces (queueing ramps 15 -> 45 ms within each round
    trip, 256 samples each) and return the timeouts a new packet would get, and the max RTT."""
    w = SlotWindow(_Silent(), job_id=1, rank=0, world=2, num_slots=256,
                   config=SlotConfig(rto=0.02, max_rto=0.5))
    ramp = np.linspace(0.015, 0.045, 256)
    rtos = []
    for _ in range(20):
        for rtt in ramp:
            w._sample(float(rtt), per_rtt)
            rtos.append(w._rto())
    return rtos[256 * 5:], float(ramp.max())


def test_rto_keeps_the_variance_of_a_window_of_samples():
    """One sample per packet, hundreds per round trip: the timeout stays above every RTT.

    With RFC 6298's per-round-trip gains applied per packet, ``rttvar`` collapses and the
    timeout follows the latest sample, below the RTT of packets later in the window
    (spurious retransmissions: a quarter of all packets in the benchmark before the fix).
    """
    rtos, worst = _rtos_on_sawtooth(per_rtt=256)
    assert min(rtos) > worst
    collapsed, _ = _rtos_on_sawtooth(per_rtt=1)
    assert min(collapsed) < worst  # the estimator this replaces
