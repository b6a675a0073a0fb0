"""Prometheus metrics of workers' in-network aggregation (a training run's own statistics).

:class:`WorkerCollector` reads, at each scrape, what each :class:`~host.transport.job.NetworkAggregator`
and its slot window count (:class:`~host.transport.slots.ExchangeStats`): packets sent
(retransmissions included), retransmissions, deadline releases, stray and partial results,
payload bytes each way, tensor elements summed and the seconds spent in exchanges — labelled
by job and rank. The window's statistics advance when an exchange (one bucket's norms or data)
completes.

Goodput in PromQL: ``rate(netco_worker_coordinates_total[1m])`` elements per second of
wall time; ``netco_worker_coordinates_total / netco_worker_exchange_seconds_total`` per
second spent communicating.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from host.exporter import MetricsServer, serve_metrics
from host.transport.job import NetworkAggregator

#: The aggregators a collector reads: a fixed set, or a callable giving the current ones.
Sources = Iterable[NetworkAggregator] | Callable[[], Iterable[NetworkAggregator]]

#: (metric name, help, value of an aggregator)
_COUNTERS: tuple[tuple[str, str, Callable[[NetworkAggregator], float]], ...] = (
    ("netco_worker_packets_sent", "THC packets sent, retransmissions included",
     lambda a: a.window.stats.packets),
    ("netco_worker_retransmits", "Contributions sent again after a timeout (flag RETX)",
     lambda a: a.window.stats.retransmits),
    ("netco_worker_deadlines", "Slots released early by a deadline (partial policy)",
     lambda a: a.window.stats.deadlines),
    ("netco_worker_stray_results", "Results for no outstanding slot and round (ignored)",
     lambda a: a.window.stats.stray_results),
    ("netco_worker_partial_results", "Results holding fewer than all workers",
     lambda a: a.window.stats.partial_results),
    ("netco_worker_payload_bytes_sent", "THC bytes (header and payload) of first transmissions",
     lambda a: a.bytes_sent),
    ("netco_worker_payload_bytes_received", "THC bytes (header and payload) of results",
     lambda a: a.bytes_received),
    ("netco_worker_coordinates", "Tensor elements summed through the switch",
     lambda a: a.coordinates),
    ("netco_worker_exchange_seconds", "Seconds spent in exchanges with the switch",
     lambda a: a.window.stats.seconds),
)


class WorkerCollector:
    """Collects ``netco_worker_*`` metrics of the aggregators ``source`` gives at scrape time.

    Parameters
    ----------
    source : iterable of NetworkAggregator, or a callable returning one
        The workers of this process (a callable, for a set that changes).
    """

    def __init__(self, source: Sources) -> None:
        self._source = source if callable(source) else (lambda s=list(source): s)

    def aggregators(self) -> list[NetworkAggregator]:
        return list(self._source())

    def collect(self) -> Iterator[Metric]:
        aggs = self.aggregators()
        labels = ["job", "rank"]
        for name, doc, get in _COUNTERS:
            m = CounterMetricFamily(name, doc, labels=labels)
            for a in aggs:
                m.add_metric([str(a.spec.job_id), str(a.rank)], float(get(a)))
            yield m
        g = GaugeMetricFamily("netco_worker_min_count",
                              "Fewest contributions in a result so far (the job's world when all "
                              "results were complete)", labels=labels)
        w = GaugeMetricFamily("netco_worker_world", "Workers in the job", labels=labels)
        miss = GaugeMetricFamily("netco_worker_missing_ranks",
                                 "Ranks missing from some partial result so far", labels=labels)
        for a in aggs:
            lab = [str(a.spec.job_id), str(a.rank)]
            st = a.window.stats
            g.add_metric(lab, float(a.world_size if st.min_count is None else st.min_count))
            w.add_metric(lab, float(a.world_size))
            miss.add_metric(lab, float(len(st.missing_ranks)))
        yield g
        yield w
        yield miss


def start_worker_metrics(aggregators: Sources, port: int, address: str = "127.0.0.1") -> MetricsServer:
    """Serve the workers' metrics at ``http://address:port/metrics`` (``port`` 0: any free).

    A training run starts one per worker process (``metrics_port + rank``; see
    :class:`host.training.harness.TrainConfig`). Raises :class:`host.exporter.ExporterError`
    when the address cannot be bound.
    """
    return serve_metrics([WorkerCollector(aggregators)], port, address)
