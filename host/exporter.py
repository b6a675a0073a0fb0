"""Serve live counters in the Prometheus text format over HTTP (the ``prometheus-client`` library).

The software target (:mod:`host.softswitch.metrics`), training workers
(:mod:`host.transport.metrics`) and the controller (:mod:`control_plane.telemetry`) each
provide a collector — an object whose ``collect()`` yields metric families read from live
counters at scrape time — and :func:`serve_metrics` puts collectors on their own registry
behind ``prometheus_client``'s HTTP server (a daemon thread). Nothing is copied or sampled
in between: a scrape reads the counters as they are.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import Metric

log = logging.getLogger(__name__)


class Collector(Protocol):
    """What ``prometheus_client`` registries take: ``collect()`` yields metric families."""

    def collect(self) -> Iterable[Metric]: ...


class ExporterError(RuntimeError):
    """The metrics server could not start (one line naming the address and the reason)."""


def registry_of(collectors: Iterable[Collector]) -> CollectorRegistry:
    """A fresh registry holding ``collectors`` (not the process-wide default one)."""
    reg = CollectorRegistry(auto_describe=True)
    for c in collectors:
        reg.register(c)
    return reg


def render(collectors: Iterable[Collector]) -> str:
    """The Prometheus text format of ``collectors`` now (what a scrape would get)."""
    return generate_latest(registry_of(collectors)).decode()


class MetricsServer:
    """An HTTP server answering ``GET /metrics`` from a registry (started by :func:`serve_metrics`).

    Attributes
    ----------
    address : str
    port : int
        The bound port (the one picked when 0 was asked for).
    registry : prometheus_client.CollectorRegistry
    """

    def __init__(self, registry: CollectorRegistry, address: str, port: int) -> None:
        self.registry = registry
        try:
            self._server, self._thread = start_http_server(port, addr=address, registry=registry)
        except OSError as exc:
            raise ExporterError(f"metrics: cannot listen on {address}:{port} "
                                f"({exc.strerror or exc})") from None
        self.address = address
        self.port = int(self._server.server_port)
        log.info("Prometheus metrics on %s", self.url)

    @property
    def url(self) -> str:
        """Where to scrape."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(collectors: Iterable[Collector], port: int,
                  address: str = "127.0.0.1") -> MetricsServer:
    """Serve ``collectors`` at ``http://address:port/metrics`` until ``close()``.

    ``port`` 0 picks a free port (see :attr:`MetricsServer.port`). The default address is
    loopback; give ``0.0.0.0`` for a Prometheus server on another machine.

    Raises
    ------
    ExporterError
        When the address cannot be bound (in use, no such address, no permission).
    """
    if not 0 <= port <= 65535:
        raise ExporterError(f"metrics: port {port} is not 0..65535")
    return MetricsServer(registry_of(collectors), address, port)


def add_metrics_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--metrics-port N`` and ``--metrics-address A`` (``what``: whose metrics, for the help)."""
    parser.add_argument("--metrics-port", type=int, default=None, metavar="N",
                        help=f"serve {what} in the Prometheus text format at "
                             "http://ADDRESS:N/metrics (0: any free port; docs/telemetry.md)")
    parser.add_argument("--metrics-address", default="127.0.0.1", metavar="ADDRESS",
                        help="address the metrics server binds (default %(default)s; 0.0.0.0 for "
                             "a Prometheus server on another machine)")
