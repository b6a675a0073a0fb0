"""Issue 16 (hardening) on the software target: what the switch learns from a datagram, how
large that table grows, and one bad destination in an output batch."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
import torch

from control_plane.embedded import EmbeddedNetwork
from host.softswitch.controls.common import Outputs
from host.softswitch.learned import key
from host.softswitch.netio import UdpPort
from host.softswitch.pipeline import THC_OFF
from host.softswitch.switch import SoftSwitch
from host.thc import THCCodec
from host.thc.simulate import allreduce as simulated_allreduce
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from tests.support.transport import in_background, run_and_close, worker_data


@pytest.fixture(scope="module")
def net():
    with EmbeddedNetwork(2, num_slots=16, in_process=True) as n:
        yield n


def _aggs(net, base):
    out = []
    for r in range(net.workers):
        a = net.address(r)
        ep = UdpEndpoint(a.switch, bind=(a.ip, 0))
        out.append(NetworkAggregator(ep, JobSpec(net.job_id, r, net.workers,
                                                 num_slots=net.num_slots, round_base=base, token=net.token)))
    return out


def test_junk_from_a_member_address_teaches_no_reply_port(net):
    """H1: one-byte datagrams from each member's address (another UDP port) before and during
    an all-reduce: the switch keeps sending results to the port that sent valid contributions."""
    codec = THCCodec()
    xs = worker_data(2, 40_000, 9)
    aggs = _aggs(net, 5000)
    junk = [0]

    def spray(stop: threading.Event) -> None:
        socks = []
        for r in range(net.workers):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((net.address(r).ip, 0))
            socks.append((s, net.address(r).switch))
        while not stop.is_set():
            for s, dst in socks:
                s.sendto(b"\x01", dst)
                junk[0] += 1
            stop.wait(0.0005)
        for s, _ in socks:
            s.close()

    ports = {net.address(r).ip: a.ep.address[1] for r, a in enumerate(aggs)}
    with in_background(spray):
        for _ in range(5000):   # junk flows before the all-reduce starts, not only by chance
            if junk[0] > 10:
                break
            time.sleep(0.001)
        got = run_and_close(aggs, lambda r: aggs[r].allreduce(xs[r], codec))
    assert junk[0] > 10
    ref = simulated_allreduce(codec, xs, round=0).average
    for g in got:
        assert torch.equal(g, ref)
    learned = net.switch.learned
    for ip, port in ports.items():
        assert learned[key(net.job_id, int.from_bytes(socket.inet_aton(ip), "big"))] == port


def test_learned_table_holds_only_validated_senders(net):
    """R1: datagrams from 2,000 distinct addresses add nothing to the learned table."""
    before = len(net.switch.learned)
    dst = net.address(0).switch
    for i in range(2000):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((f"127.64.{i // 250}.{i % 250 + 1}", 0))
            s.sendto(b"\x00", dst)
    # wait until the switch has taken them all in
    deadline = threading.Event()
    for _ in range(100):
        if net.switch.pipeline.rx and net.switch.stats()["drops"].get(1, 0) >= 2000:
            break
        deadline.wait(0.05)
    assert net.switch.stats()["drops"].get(1, 0) >= 2000   # SHORT, counted
    assert len(net.switch.learned) <= max(before, net.workers)


def test_one_bad_destination_costs_only_itself():
    """C2: an output batch towards a UDP port where one frame's destination cannot be sent to
    (a routed frame to 10.9.9.9 from a socket bound to loopback: EINVAL) still delivers the
    frames before and after it."""
    rx = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
    for k, s in enumerate(rx):
        s.bind((f"127.0.0.{71 + k}", 21576))
        s.settimeout(2.0)
    port = UdpPort(1, ("127.0.0.1", 0))
    sw = SoftSwitch([port])
    try:
        out = Outputs(8)
        dsts = ["127.0.0.71", "10.9.9.9", "127.0.0.72"]
        for i, d in enumerate(dsts):
            out.buf[i, 30:34] = list(socket.inet_aton(d))
            out.buf[i, THC_OFF:THC_OFF + 4] = [i, i, i, i]
            out.lens[i] = THC_OFF + 4
            out.ports[i] = 1
        out.n = 3
        out.order = np.arange(3)
        sw._send(out)
        got = [s.recv(100) for s in rx]
        assert got == [bytes([0] * 4), bytes([2] * 4)]
        assert sw.tx_lost == 1
    finally:
        sw.close()
        for s in rx:
            s.close()
