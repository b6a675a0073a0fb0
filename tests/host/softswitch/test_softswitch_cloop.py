"""The software switch's data plane loop in C (``_fastpath.loop``, ``host/softswitch/_swloop.c``)
against its Python loop, in-process over loopback UDP: the same exact sums, every frame
counted, reply ports learned from the batches the C loop took, junk handed to the Python
pipeline and counted there; and the learned-ports table both loops share."""

from __future__ import annotations

import socket

import pytest
import torch

from control_plane.embedded import EmbeddedNetwork
from host.softswitch.learned import LearnedPorts
from host.softswitch.switch import SoftSwitch
from host.thc import THCCodec
from host.thc.simulate import allreduce as simulated_allreduce
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from tests.support.transport import run_workers, worker_data


def _allreduce(net: EmbeddedNetwork, xs, base: int):
    codec = THCCodec()
    aggs = []
    for r in range(net.workers):
        a = net.address(r)
        ep = UdpEndpoint(a.switch, bind=(a.ip, 0))
        aggs.append(NetworkAggregator(ep, JobSpec(net.job_id, r, net.workers,
                                                  num_slots=net.num_slots, round_base=base,
                                                  token=net.token)))
    try:
        got = run_workers(net.workers, lambda r: aggs[r].allreduce(xs[r], codec))
        ports = {net.address(r).ip: a.ep.address[1] for r, a in enumerate(aggs)}
    finally:
        for a in aggs:
            a.ep.close()
    return got, ports, simulated_allreduce(codec, xs, round=0).average


@pytest.mark.parametrize("c_loop", ["1", "0"])
def test_c_loop_and_python_loop_give_the_reference_sums(c_loop, monkeypatch):
    monkeypatch.setenv("NETCO_SOFTSWITCH_CLOOP", c_loop)
    if c_loop == "1" and not SoftSwitch.c_loop_available():
        pytest.skip("the C loop (host/softswitch/_fastpath) is not built")
    xs = worker_data(3, 70_000, 4)
    with EmbeddedNetwork(3, num_slots=32, in_process=True) as net:
        sw = net.switch
        assert sw.c_loop == (c_loop == "1")
        # a foreign datagram first: the C loop hands its batch to the pipeline, which counts it
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((net.address(0).ip, 0))
            s.sendto(b"\x01", net.address(0).switch)
        got, ports, ref = _allreduce(net, xs, 9000)
        st = sw.stats()
    for g in got:
        assert torch.equal(g, ref)
    for ip, port in ports.items():
        assert sw.learned[int.from_bytes(socket.inet_aton(ip), "big")] == port
    assert st["drops"].get(1, 0) >= 1                     # SHORT, counted
    assert st["rx"] == sum(st["drops"].values()) + sum(st["outcomes"].values())
    assert st["contributions"] == st["outcomes"]["contribution"]
    assert st["tx_lost"] == 0
    if c_loop == "1":
        assert st["c_loop"]["batches"] > 0 and st["c_loop"]["handoffs"] >= 1
    else:
        assert st["c_loop"]["batches"] == 0


def test_learned_ports_table():
    t = LearnedPorts(3)
    t[10] = 1000
    t[11] = 1001
    t[10] = 2000
    assert len(t) == 2 and t[10] == 2000 and t.get(11) == 1001 and t.get(12, 7) == 7
    assert 11 in t and 12 not in t and sorted(t.items()) == [(10, 2000), (11, 1001)]
    t[12] = 1
    t[13] = 2   # a fourth address does not fit: the guard empties the table
    assert len(t) == 0 and t.get(10) is None
    with pytest.raises(KeyError):
        t[10]
