"""Prometheus metrics of the software target (host/softswitch/metrics.py), scraped over HTTP
after a real THC all-reduce through it, against the packets the run must have produced; the
controller's telemetry snapshot (control_plane/telemetry.py) must read the same counters."""

from __future__ import annotations

import io
import socket
import time
import urllib.request

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from control_plane.embedded import EmbeddedNetwork
from control_plane.telemetry import SnapshotCollector, take_snapshot, watch_controller
from host.exporter import ExporterError, render, serve_metrics
from host.protocol import codec
from host.protocol import layout as lay
from host.softswitch.metrics import SwitchCollector, start_switch_metrics
from host.thc import THCCodec
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from host.transport.slots import SlotConfig
from tests.support.transport import run_workers


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def expected_packets(numel: int) -> tuple[int, int]:
    """(DATA, NORM) packets one worker sends for an all-reduce of ``numel`` elements."""
    lay_ = THCCodec().layout(numel)
    return -(-lay_.padded // lay.COORDS_PER_PACKET), -(-lay_.n_chunks // lay.NORMS_PER_PACKET)


def run_allreduce(net: EmbeddedNetwork, numel: int, slots: SlotConfig) -> list[NetworkAggregator]:
    n = net.workers
    codec_ = THCCodec()
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(numel, generator=g) for _ in range(n)]
    aggs = []
    for r in range(n):
        a = net.address(r)
        aggs.append(NetworkAggregator(UdpEndpoint(a.switch, bind=(a.ip, 0)),
                                      JobSpec(net.job_id, r, n, num_slots=net.num_slots,
                                              token=net.token), slots))
    run_workers(n, lambda r: aggs[r].allreduce(xs[r], codec_))
    return aggs


def send_bad(net: EmbeddedNetwork) -> None:
    """One MALFORMED (slot_set is not round parity) and one BAD_VERSION datagram from rank 0."""
    a = net.address(0)
    good = codec.Header(msg_type=lay.MsgType.DATA, job_id=net.job_id, slot=0, round=7)
    bad_set = codec.encode(codec.Header(msg_type=lay.MsgType.DATA, job_id=net.job_id, slot=0,
                                        round=7, slot_set=0), [1, 2, 3])
    bad_version = codec.encode(good, [1, 2, 3])
    bad_version = bytes([lay.THC_VERSION + 1]) + bad_version[1:]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((a.ip, 0))
        s.sendto(bad_set, a.switch)
        s.sendto(bad_version, a.switch)


def wait_for(pred, what: str, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.02)


def test_switch_metrics_count_a_real_allreduce():
    n, numel = 2, 3000
    k, kn = expected_packets(numel)
    with EmbeddedNetwork(n, num_slots=16, in_process=True) as net, \
            start_switch_metrics(net.switch, 0) as srv:
        before = scrape(srv.url)
        sw = (("switch", "s1"),)
        job = (("job", str(net.job_id)), ("switch", "s1"))
        assert before[("netco_switch_contributions_total", job)] == 0
        assert before[("netco_switch_jobs", sw)] == 1
        # a retransmission timeout far above loopback round trips: no spurious resends
        aggs = run_allreduce(net, numel, SlotConfig(rto=1.0, max_rto=2.0))
        send_bad(net)
        retx = sum(a.window.stats.retransmits for a in aggs)
        want_rx = n * (k + kn) + 2 + retx
        wait_for(lambda: scrape(srv.url)[("netco_switch_frames_received_total", sw)] == want_rx,
                 f"{want_rx} frames received")
        got = scrape(srv.url)
        assert got[("netco_switch_contributions_total", job)] == n * (k + kn)
        assert got[("netco_switch_results_total", job)] == k + kn
        drops = {r.name: got[("netco_switch_drops_total", (("reason", r.name), ("switch", "s1")))]
                 for r in lay.DropReason if r is not lay.DropReason.NONE}
        assert drops["MALFORMED"] == 1 and drops["BAD_VERSION"] == 1
        resent = got[("netco_switch_resent_total", job)]
        # every retransmission that reached the switch was answered or dropped as such
        assert resent + drops["DUPLICATE"] + drops["STALE"] == retx
        assert sum(drops.values()) == 2 + drops["DUPLICATE"] + drops["STALE"]
        assert got[("netco_switch_frames_sent_total", sw)] == n * (k + kn) + resent
        assert got[("netco_switch_errors_total", sw)] == 0

        # the controller reads the same counters over P4Runtime
        snap = take_snapshot(net.controller)
        (j,) = snap.jobs
        assert (j.contributions, j.results, j.resent) == (n * (k + kn), k + kn, resent)
        (s,) = snap.switches
        assert s.reachable and s.drops["MALFORMED"] == 1 and s.drops["BAD_VERSION"] == 1
        # the watch table of the live switch, into a log (plain blocks)
        log = io.StringIO()
        assert watch_controller(net.controller, 0.05, rounds=2, out=log) == 2
        rows = [line.split() for line in log.getvalue().splitlines() if line.startswith("train")]
        assert len(rows) == 2 and rows[0][:6] == ["train", str(net.job_id), "s1", str(n * (k + kn)),
                                                  str(k + kn), str(int(resent))]
        assert rows[1][6:] == ["0", "pkt/s", "0", "pkt/s", "0", "coord/s"]   # idle now
        text = render([SnapshotCollector(lambda: snap)])
        assert f'netco_job_contributions_total{{job="train",job_id="{net.job_id}",switch="s1"}} ' \
               f"{float(n * (k + kn))}" in text
        assert 'netco_switch_drops_total{reason="MALFORMED",switch="s1"} 1.0' in text


def test_collector_without_jobs_and_a_port_in_use():
    with EmbeddedNetwork(1, num_slots=4, in_process=True, echo=True) as net:
        text = render([SwitchCollector(net.switch, "edge")])
        assert 'netco_switch_jobs{switch="edge"} 0.0' in text
        samples = [line for line in text.splitlines() if not line.startswith("#")]
        assert not [line for line in samples if line.startswith("netco_switch_contributions_total")]
        with serve_metrics([SwitchCollector(net.switch)], 0) as srv, \
                pytest.raises(ExporterError, match=f"cannot listen on 127.0.0.1:{srv.port}"):
            serve_metrics([SwitchCollector(net.switch)], srv.port)
