"""Prometheus metrics of a running software target (``netco switch --metrics-port N``).

:class:`SwitchCollector` reads, at each scrape, the same counter arrays the controller reads
over P4Runtime (``ingress.thc_slot.contributions``, ``ingress.thc_output.results``,
``ingress.thc_output.resent`` per job, ``ingress.drops`` per :class:`~host.protocol.layout.DropReason`),
labelled by the job ids the controller installed, plus the target's software-only totals
(frames received, sent, lost on send; batches; data-plane errors). A pipeline commit zeroes
the program's counters, as loading a program onto a P4 target does; Prometheus sees that
as a counter reset.

Goodput in PromQL: ``rate(netco_switch_results_total[1m]) * 256`` coordinates per second
(``COORDS_PER_PACKET``; norm results count as whole packets, so it is an upper bound).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from host.exporter import MetricsServer, serve_metrics
from host.protocol.layout import DropReason
from host.softswitch.switch import SoftSwitch

#: Per-job counters of the program: (metric name, help, Counters attribute).
JOB_METRICS = (
    ("netco_switch_contributions", "Contributions (DATA, NORM, PARTIAL) absorbed into a slot, "
     "per job (ingress.thc_slot.contributions)", "contributions"),
    ("netco_switch_results", "Results released (multicast or sent up to the parent), per job "
     "(ingress.thc_output.results)", "results"),
    ("netco_switch_resent", "Stored results sent again to answer a retransmission, per job "
     "(ingress.thc_output.resent)", "resent"),
)


class SwitchCollector:
    """Collects ``netco_switch_*`` metrics from ``switch`` at scrape time.

    Parameters
    ----------
    switch : SoftSwitch
    name : str
        Value of the ``switch`` label (the controller file's switch name).
    """

    def __init__(self, switch: SoftSwitch, name: str = "s1") -> None:
        self.switch = switch
        self.name = name

    def jobs(self) -> list[tuple[int, int]]:
        """(job id, counter index) of the installed jobs."""
        cfg = self.switch.pipeline.cfg
        ids = cfg.job_id[:-1].tolist()          # the last row is a dummy
        index = cfg.job["index"][: len(ids)].tolist() if "index" in cfg.job else []
        return sorted(zip(ids, index, strict=False))

    def collect(self) -> Iterator[Metric]:
        sw = self.switch
        pl = sw.pipeline
        c = pl.counters
        jobs = self.jobs()
        for name, doc, attr in JOB_METRICS:
            arr = getattr(c, attr)
            m = CounterMetricFamily(name, doc, labels=["switch", "job"])
            for jid, idx in jobs:
                if 0 <= idx < arr.size:
                    m.add_metric([self.name, str(jid)], float(arr[idx]))
            yield m
        m = CounterMetricFamily("netco_switch_drops", "Packets dropped, per reason (ingress.drops; "
                                "docs/protocol.md, Validation and drop reasons)",
                                labels=["switch", "reason"])
        for r in DropReason:
            if r is not DropReason.NONE and r < c.drops.size:
                m.add_metric([self.name, r.name], float(c.drops[r]))
        yield m
        st = sw.stats()   # with the C loop's totals
        for name, doc, value in (
            ("netco_switch_frames_received", "Frames (or THC datagrams) received", st["rx"]),
            ("netco_switch_frames_sent", "Frames handed to the ports' sockets", st["tx"]),
            ("netco_switch_frames_lost", "Frames the ports' sockets refused (send buffer full)",
             st["tx_lost"]),
            ("netco_switch_batches", "Receive batches processed", st["batches"]),
            ("netco_switch_errors", "Batches lost to a data-plane error (logged)", sw.errors),
            ("netco_switch_rate_limited", "Frames dropped because their source sent too many "
             "invalid ones (docs/security.md, rate limit)", st["rate_limit"]["dropped"]),
            ("netco_switch_rate_limit_trips", "Times a source was held by the rate limit",
             st["rate_limit"]["trips"]),
        ):
            m = CounterMetricFamily(name, doc, labels=["switch"])
            m.add_metric([self.name], float(value))
            yield m
        g = GaugeMetricFamily("netco_switch_jobs", "Jobs installed by the controller", labels=["switch"])
        g.add_metric([self.name], float(len(jobs)))
        yield g


def start_switch_metrics(switch: SoftSwitch, port: int, address: str = "127.0.0.1",
                         name: str = "s1") -> MetricsServer:
    """Serve ``switch``'s metrics at ``http://address:port/metrics`` (``port`` 0: any free).

    Raises :class:`host.exporter.ExporterError` when the address cannot be bound.
    """
    return serve_metrics([SwitchCollector(switch, name)], port, address)
