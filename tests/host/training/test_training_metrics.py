"""A training run through the software target serves each worker's statistics in the
Prometheus text format while it trains (TrainConfig.metrics_port, host/transport/metrics.py)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from control_plane.cli.train import network_for, session
from host.ddp.baselines import CompressorSpec
from host.thc.config import THCConfig
from host.training.harness import TrainConfig, train


class _Args:
    aggregator = "network"
    switch = "embedded"
    workers = 2
    job_id = 4
    slots = 32
    policy = "exact"
    uplink = "indices"
    worker_ips = None


def _free_pair_below_ephemeral() -> int:
    """Two free TCP ports N, N+1 below the kernel's ephemeral range: the scrape loop's connects
    to a port nobody listens on yet can then never take (self-connect) the port a worker binds."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in range(low - 2000, low - 1, 2):
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no two free ports below the ephemeral range")


@pytest.mark.slow
def test_each_worker_serves_its_metrics_while_training():
    port = _free_pair_below_ephemeral()   # rank r serves on port + r
    done = threading.Event()
    report: dict = {}
    with network_for(_Args(), THCConfig()) as net:
        cfg = TrainConfig(task="digits", spec=CompressorSpec("thc"), workers=2, steps=30,
                          eval_every=30, seed=1, network=session(net), metrics_port=port)

        def run() -> None:
            try:
                report.update(train(cfg))
            finally:
                done.set()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        seen: dict[int, dict] = {}
        while len(seen) < 2 and not done.is_set():
            for rank in (0, 1):
                if rank in seen:
                    continue
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port + rank}/metrics", timeout=5) as r:
                        text = r.read().decode()
                except (urllib.error.URLError, ConnectionError, http.client.HTTPException):
                    # not serving yet (a connect to an unbound local port can meet itself)
                    continue
                samples = {s.name: s for fam in text_string_to_metric_families(text) for s in fam.samples}
                if samples["netco_worker_coordinates_total"].value > 0:   # a bucket went through
                    seen[rank] = samples
            time.sleep(0.02)
        t.join(300)
    assert report["aggregator"] == "network"
    assert sorted(seen) == [0, 1], "a worker's metrics were never scraped during the run"
    for rank, s in seen.items():
        assert s["netco_worker_packets_sent_total"].labels == {"job": "4", "rank": str(rank)}
        assert s["netco_worker_world"].value == 2
        assert s["netco_worker_packets_sent_total"].value > 0
