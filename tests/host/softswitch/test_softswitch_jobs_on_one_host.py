"""Two jobs with members on one host (one IPv4 address, a UDP port per job): one job's valid
packets from the shared address must not redirect the other job's results (issue 33, item 3:
the learned reply port was keyed by address alone, and job A went from 0.01 s to 30 s or
failed). The software target as a process of its own, its C loop and its Python loop."""

from __future__ import annotations

import time

import pytest
import torch

from control_plane.embedded import jobs_sharing_hosts
from host.bench.alongside import sending_alongside
from host.protocol import codec as wire
from host.softswitch.launch import UdpSwitch
from host.thc import THCCodec
from host.thc.simulate import allreduce as simulated_allreduce
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from host.transport.slots import SlotConfig
from tests.support.transport import run_workers, worker_data

IPS = ["127.0.0.11", "127.0.0.12"]


@pytest.mark.parametrize("loop", ["--c-loop", "--no-c-loop"])
def test_another_jobs_packets_from_a_shared_host_do_not_take_its_results(tmp_path, loop):
    sw = UdpSwitch(tmp_path, 2, extra=[loop]).start()
    try:
        ctl = jobs_sharing_hosts(sw.address, IPS)
        slots = SlotConfig(give_up=5.0)

        def agg(job: int, rank: int) -> NetworkAggregator:
            return NetworkAggregator(UdpEndpoint(("127.0.0.1", sw.ports[rank + 1]),
                                                 bind=(IPS[rank], 0)),
                                     JobSpec(job, rank, 2, num_slots=16, token=ctl.tokens[job],
                                             round_base=1000), slots)

        a = [agg(1, r) for r in range(2)]
        # job b's rank 0, on the same address as job a's rank 0, another UDP port: valid
        # status requests all along (each answered, so each teaches the switch its port)
        b0 = UdpEndpoint(("127.0.0.1", sw.ports[1]), bind=(IPS[0], 0))
        peek = wire.norm_status_request(2, 0, ctl.tokens[2])
        codec = THCCodec()
        xs = worker_data(2, 50_000, 7)
        try:
            with sending_alongside(b0, peek) as answered:
                t0 = time.monotonic()
                got = run_workers(2, lambda r: [a[r].allreduce(xs[r], codec) for _ in range(3)],
                                  timeout=60)
                took = time.monotonic() - t0
        finally:
            b0.close()
            for x in a:
                x.close(finish=False)
        assert answered[0] > 0                       # job b's packets were valid and answered
        ref = simulated_allreduce(codec, xs, round=0).average
        assert all(torch.equal(g[0], ref) for g in got)
        assert sum(x.window.stats.retransmits for x in a) < 50, took   # no results lost
    finally:
        sw.stop()
