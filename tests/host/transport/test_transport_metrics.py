"""Workers' Prometheus metrics (host/transport/metrics.py), scraped over HTTP after real
all-reduces through the software target, against the packets and bytes they must have sent."""

from __future__ import annotations

import threading
import urllib.request

import torch
from prometheus_client.parser import text_string_to_metric_families

from control_plane.embedded import EmbeddedNetwork
from control_plane.telemetry import scrape_workers
from host.protocol import layout as lay
from host.thc import THCCodec
from host.transport.faults import FaultyEndpoint
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.metrics import start_worker_metrics
from host.transport.ports import UdpEndpoint
from host.transport.slots import SlotConfig


def scrape(url: str) -> dict[tuple[str, int], float]:
    """{(sample name, rank): value}."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {(s.name, int(s.labels["rank"])): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_worker_metrics_count_packets_retransmissions_and_goodput():
    n, numel, rounds = 2, 3000, 2
    codec = THCCodec()
    lay_ = codec.layout(numel)
    k = -(-lay_.padded // lay.COORDS_PER_PACKET)
    kn = -(-lay_.n_chunks // lay.NORMS_PER_PACKET)
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(numel, generator=g) for _ in range(n)]
    with EmbeddedNetwork(n, num_slots=8) as net:
        aggs = []
        for r in range(n):
            a = net.address(r)
            ep = UdpEndpoint(a.switch, bind=(a.ip, 0))
            if r == 1:
                ep = FaultyEndpoint(ep, loss_pct=20.0, seed=2)
            aggs.append(NetworkAggregator(ep, JobSpec(net.job_id, r, n, num_slots=8, token=net.token),
                                          SlotConfig(rto=0.02, max_rto=0.2)))
        with start_worker_metrics(aggs, 0) as srv:
            assert scrape(srv.url)[("netco_worker_packets_sent_total", 0)] == 0

            def go(r: int) -> None:
                for _ in range(rounds):
                    aggs[r].allreduce(xs[r], codec)

            ts = [threading.Thread(target=go, args=(r,), daemon=True) for r in range(n)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            assert not any(t.is_alive() for t in ts)
            got = scrape(srv.url)
            # what netco controller status --watch --workers URL reads
            workers, failed = scrape_workers([srv.url, "http://127.0.0.1:1/metrics"])
        for a in aggs:
            a.ep.close()
    per_round = k + kn
    for r, a in enumerate(aggs):
        retx = a.window.stats.retransmits
        assert got[("netco_worker_retransmits_total", r)] == retx
        # plus the repair re-sends of answered packets (issue 16, H3), none without loss
        assert got[("netco_worker_packets_sent_total", r)] == \
            rounds * per_round + retx + a.window.stats.repairs
        assert got[("netco_worker_coordinates_total", r)] == rounds * numel
        assert got[("netco_worker_payload_bytes_sent_total", r)] == \
            rounds * (k * (lay.THC_HEADER_BYTES + lay.INDICES.nbytes)
                      + kn * (lay.THC_HEADER_BYTES + lay.NORMS.nbytes))
        lanes = lay.LANES[lay.lane_bits_for(n, 30)].nbytes
        assert got[("netco_worker_payload_bytes_received_total", r)] == \
            rounds * (k * (lay.THC_HEADER_BYTES + lanes) + kn * (lay.THC_HEADER_BYTES + lay.NORMS.nbytes))
        assert got[("netco_worker_exchange_seconds_total", r)] > 0
        assert got[("netco_worker_min_count", r)] == n == got[("netco_worker_world", r)]
        assert got[("netco_worker_missing_ranks", r)] == 0
    assert got[("netco_worker_retransmits_total", 1)] > 0   # rank 1's loss was in effect
    assert [(w.job_id, w.rank) for w in workers] == [(net.job_id, 0), (net.job_id, 1)]
    for w, a in zip(workers, aggs, strict=True):
        assert (w.packets, w.retransmits, w.coordinates, w.bytes_sent, w.bytes_received) == \
            (a.window.stats.packets, a.window.stats.retransmits, a.coordinates, a.bytes_sent,
             a.bytes_received)
    assert list(failed) == ["http://127.0.0.1:1/metrics"]
