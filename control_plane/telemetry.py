"""Live per-job telemetry from the switches' P4Runtime counters (``netco controller status --watch``).

A :class:`Snapshot` holds, for one moment, every switch's reachability and drop counters
(``ingress.drops`` by :class:`~host.protocol.layout.DropReason`) and every job's counters on
every switch it is placed on (``contributions``, ``results``, ``resent``), read over
P4Runtime by :meth:`control_plane.controller.Controller.status` (read only, low election id).
Two snapshots give rates: contributions and results per second and the goodput, results per
second × ``COORDS_PER_PACKET`` coordinates (an upper bound: norm results count as whole
packets). With the URLs of the workers' metrics servers (:mod:`host.transport.metrics`) a
snapshot also holds each worker's own statistics (packets, retransmissions, coordinates), and
the table their rates: a worker's goodput is exact (tensor elements summed per second).

* :func:`render_table` turns a snapshot (and the previous one, for rates) into table lines;
* :func:`watch` redraws it every ``interval`` seconds — in place on a terminal, as plain
  blocks of lines (each with its time) when the output is a file or a pipe;
* :class:`SnapshotCollector` exports the same counters in the Prometheus text format (for
  targets that cannot export themselves, e.g. BMv2), with :func:`host.exporter.serve_metrics`.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from control_plane.controller import (
    DROP_COUNTER,
    JOB_COUNTERS,
    Controller,
    SwitchResult,
    run_sync,
)
from host.protocol.layout import (
    COORDS_PER_PACKET,
    RATE_LIMIT_FRAMES,
    RATE_LIMIT_HOLD_US,
    RATE_LIMIT_WINDOW_US,
    DropReason,
)

log = logging.getLogger(__name__)

#: Short names of the per-job counters, in :data:`JOB_COUNTERS` order.
JOB_COUNTER_NAMES = tuple(c.rsplit(".", 1)[-1] for c in JOB_COUNTERS)


@dataclass(frozen=True)
class JobCounters:
    """One job's counters on one switch (None: the switch did not answer or lacks the counter)."""

    job: str
    job_id: int
    switch: str
    index: int
    contributions: int | None
    results: int | None
    resent: int | None

    @property
    def key(self) -> tuple[str, str]:
        return (self.switch, self.job)


@dataclass(frozen=True)
class SwitchState:
    """One switch: reached or not, and its drop counters (reason name -> packets)."""

    switch: str
    address: str
    reachable: bool
    error: str | None = None
    drops: dict[str, int] = field(default_factory=dict)
    #: ``ingress.rate_limit.trips``: sources its rate limit held so far (None: the switch did
    #: not answer or its program has no such counter)
    rate_limit_trips: int | None = None


@dataclass(frozen=True)
class WorkerStats:
    """One worker's own statistics, scraped from its metrics server (:mod:`host.transport.metrics`)."""

    source: str
    job_id: int
    rank: int
    packets: int
    retransmits: int
    coordinates: int
    bytes_sent: int
    bytes_received: int

    @property
    def key(self) -> tuple[int, int]:
        return (self.job_id, self.rank)


@dataclass(frozen=True)
class Snapshot:
    """Counters of all switches and jobs (and workers, when scraped) at ``time`` (epoch s)."""

    time: float
    switches: tuple[SwitchState, ...]
    jobs: tuple[JobCounters, ...]
    workers: tuple[WorkerStats, ...] = ()
    #: worker metrics URLs that did not answer: url -> reason
    unreachable: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {"time": self.time,
                "switches": [s.__dict__ for s in self.switches],
                "jobs": [j.__dict__ for j in self.jobs],
                "workers": [w.__dict__ for w in self.workers],
                "unreachable": dict(self.unreachable)}


#: WorkerStats field -> the worker metric it is read from
_WORKER_METRICS = {"packets": "netco_worker_packets_sent_total",
                   "retransmits": "netco_worker_retransmits_total",
                   "coordinates": "netco_worker_coordinates_total",
                   "bytes_sent": "netco_worker_payload_bytes_sent_total",
                   "bytes_received": "netco_worker_payload_bytes_received_total"}


def parse_worker_metrics(text: str, source: str = "") -> list[WorkerStats]:
    """The workers in a scrape of :func:`host.transport.metrics.start_worker_metrics`'s server."""
    from prometheus_client.parser import text_string_to_metric_families

    vals: dict[tuple[int, int], dict[str, float]] = {}
    names = {v: k for k, v in _WORKER_METRICS.items()}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name in names and "job" in smp.labels and "rank" in smp.labels:
                key = (int(smp.labels["job"]), int(smp.labels["rank"]))
                vals.setdefault(key, {})[names[smp.name]] = smp.value
    return [WorkerStats(source, job, rank, **{k: int(v.get(k, 0)) for k in _WORKER_METRICS})
            for (job, rank), v in sorted(vals.items())]


def scrape_workers(urls: list[str], timeout: float = 2.0) -> tuple[list[WorkerStats], dict[str, str]]:
    """Scrape the workers' metrics servers: (their statistics, {url: why not} of the silent)."""
    import urllib.request

    workers: list[WorkerStats] = []
    failed: dict[str, str] = {}
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                workers += parse_worker_metrics(r.read().decode(), url)
        except (OSError, ValueError) as exc:
            failed[url] = str(getattr(exc, "reason", exc))
    return workers, failed


def _reason(idx: int) -> str:
    try:
        return DropReason(idx).name
    except ValueError:
        return f"reason {idx}"


def snapshot_of(ctl: Controller, results: list[SwitchResult], now: float | None = None) -> Snapshot:
    """The snapshot that ``ctl.status()``'s ``results`` describe."""
    switches = tuple(
        SwitchState(r.switch, r.address, r.ok, r.error,
                    {_reason(i): n for i, n in sorted(r.counters.get(DROP_COUNTER, {}).items()) if n},
                    r.rate_limit_trips)
        for r in results)
    by_switch = {r.switch: r for r in results}
    jobs = []
    for job in sorted(ctl.cfg.jobs, key=lambda j: j.id):
        idx = ctl.placement.index[job.name]
        for sw, placed in sorted(ctl.placement.per_switch.items()):
            if sw not in by_switch or not any(js.job.name == job.name for js in placed):
                continue
            counters = by_switch[sw].counters
            vals = [counters.get(c, {}).get(idx) if counters else None for c in JOB_COUNTERS]
            jobs.append(JobCounters(job.name, job.id, sw, idx, *vals))
    return Snapshot(time.time() if now is None else now, switches, tuple(jobs))


def take_snapshot(ctl: Controller, switches: list[str] | None = None,
                  worker_urls: list[str] = ()) -> Snapshot:
    """Read every switch's counters now (synchronous; one P4Runtime read session per switch),
    and the workers' statistics from ``worker_urls`` (their metrics servers)."""
    snap = snapshot_of(ctl, run_sync(ctl.status(switches=switches)))
    if not worker_urls:
        return snap
    workers, failed = scrape_workers(list(worker_urls))
    return Snapshot(snap.time, snap.switches, snap.jobs, tuple(workers), failed)


@dataclass(frozen=True)
class JobRates:
    """Per-second rates of one job on one switch between two snapshots."""

    contributions: float
    results: float
    resent: float

    @property
    def goodput(self) -> float:
        """Coordinates per second (results × COORDS_PER_PACKET; an upper bound)."""
        return self.results * COORDS_PER_PACKET


def rates(prev: Snapshot, cur: Snapshot) -> dict[tuple[str, str], JobRates]:
    """Rates of the jobs present in both snapshots (counter resets give no rate)."""
    dt = cur.time - prev.time
    if dt <= 0:
        return {}
    before = {j.key: j for j in prev.jobs}
    out = {}
    for j in cur.jobs:
        p = before.get(j.key)
        if p is None:
            continue
        vals = []
        for name in JOB_COUNTER_NAMES:
            a, b = getattr(p, name), getattr(j, name)
            vals.append(None if a is None or b is None or b < a else (b - a) / dt)
        if None not in vals:
            out[j.key] = JobRates(*vals)
    return out


def _si(x: float, unit: str) -> str:
    for div, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.1f} {prefix}{unit}"
    return f"{x:.0f} {unit}" if x == int(x) or abs(x) >= 10 else f"{x:.1f} {unit}"


def table(rows: list[list[Any]], header: list[str]) -> list[str]:
    """Left-aligned columns under a header and a rule of dashes."""
    cells = [header, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return [lines[0], "  ".join("-" * w for w in widths), *lines[1:]]


def render_table(cur: Snapshot, prev: Snapshot | None = None) -> list[str]:
    """Table lines of ``cur``: switches, per-job counters (with rates when ``prev`` is given)
    and drops by reason."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(cur.time))
    out = [f"netco switch counters at {stamp}", ""]
    out += table([[s.switch, s.address, "yes" if s.reachable else "NO",
                   "-" if s.rate_limit_trips is None else s.rate_limit_trips, s.error or ""]
                  for s in cur.switches],
                 ["switch", "address", "reachable", "rate-limit trips", "error"])
    r = rates(prev, cur) if prev is not None else {}
    rows = []
    for j in cur.jobs:
        vals = ["-" if getattr(j, n) is None else getattr(j, n) for n in JOB_COUNTER_NAMES]
        jr = r.get(j.key)
        rate_cells = (["-"] * 3 if jr is None else
                      [_si(jr.contributions, "pkt/s"), _si(jr.results, "pkt/s"),
                       _si(jr.goodput, "coord/s")])
        rows.append([j.job, j.job_id, j.switch, *vals, *rate_cells])
    out.append("")
    if rows:
        out += table(rows, ["job", "id", "switch", "contributions", "results", "resent",
                            "contrib rate", "result rate", "goodput"])
    else:
        out.append("no jobs")
    out += _worker_lines(cur, prev)
    drows = []
    before = {s.switch: s.drops for s in prev.switches} if prev is not None else {}
    dt = cur.time - prev.time if prev is not None else 0.0
    for s in cur.switches:
        for reason, n in s.drops.items():
            b = before.get(s.switch, {}).get(reason, 0) if s.switch in before else None
            rate = _si((n - b) / dt, "pkt/s") if b is not None and dt > 0 and n >= b else "-"
            drows.append([s.switch, reason, n, rate])
    out.append("")
    out += table(drows, ["switch", "drop reason", "packets", "rate"]) if drows else ["no drops"]
    return out


def rate_limit_lines(cur: Snapshot, prev: Snapshot | None) -> list[str]:
    """One line per switch whose rate limit held a source since ``prev`` (every switch with
    trips when there is no ``prev``): what :func:`watch` logs (docs/security.md)."""
    before = {s.switch: s.rate_limit_trips for s in prev.switches} if prev is not None else {}
    out = []
    for s in cur.switches:
        held = (s.rate_limit_trips or 0) - (before.get(s.switch) or 0)
        if s.rate_limit_trips is not None and held > 0:
            out.append(f"{s.switch}: the rate limit held {held} more source(s) ({s.rate_limit_trips} "
                       f"so far): each sent more than {RATE_LIMIT_FRAMES} frames failing validation "
                       f"within {RATE_LIMIT_WINDOW_US / 1e6:g} s; their frames are dropped as "
                       f"RATE_LIMITED for {RATE_LIMIT_HOLD_US / 1e6:g} s")
    return out


def _worker_lines(cur: Snapshot, prev: Snapshot | None) -> list[str]:
    if not cur.workers and not cur.unreachable:
        return []
    before = {w.key: w for w in prev.workers} if prev is not None else {}
    dt = cur.time - prev.time if prev is not None else 0.0
    rows = []
    for w in cur.workers:
        p = before.get(w.key)
        ok = p is not None and dt > 0 and w.coordinates >= p.coordinates and w.packets >= p.packets
        rate = [_si((w.packets - p.packets) / dt, "pkt/s"),
                _si((w.coordinates - p.coordinates) / dt, "coord/s")] if ok else ["-", "-"]
        rows.append([w.job_id, w.rank, w.packets, w.retransmits, w.coordinates, *rate])
    out = [""]
    if rows:
        out += table(rows, ["job", "rank", "packets", "retransmits", "coordinates", "packet rate",
                            "goodput"])
    out += [f"worker metrics {url}: {why}" for url, why in sorted(cur.unreachable.items())]
    return out


def watch(take: Callable[[], Snapshot], interval: float, *, rounds: int = 0,
          out: TextIO | None = None, tty: bool | None = None,
          sleep: Callable[[float], None] = time.sleep) -> int:
    """Redraw :func:`render_table` of ``take()`` every ``interval`` seconds.

    On a terminal the screen is cleared and redrawn in place; otherwise each refresh is a
    plain block of lines followed by a blank line (a log stays readable). ``rounds`` > 0 stops
    after that many refreshes; Ctrl-C stops cleanly. Returns the number of refreshes.
    """
    if interval <= 0:
        raise ValueError(f"interval {interval}: must be positive")
    out = out or sys.stdout
    if tty is None:
        tty = out.isatty()
    prev = None
    n = 0
    try:
        while True:
            cur = take()
            lines = render_table(cur, prev)
            for line in rate_limit_lines(cur, prev):
                log.warning("%s", line)        # a log line, and in the block (a TTY redraws)
                lines.append(line)
            if tty:
                out.write("\x1b[H\x1b[2J")
            out.write("\n".join(lines) + "\n")
            if not tty:
                out.write("\n")
            out.flush()
            prev = cur
            n += 1
            if rounds and n >= rounds:
                return n
            sleep(interval)
    except KeyboardInterrupt:
        return n


def watch_controller(ctl: Controller, interval: float, *, switches: list[str] | None = None,
                     worker_urls: list[str] = (), rounds: int = 0, out: TextIO | None = None) -> int:
    """``netco controller status --watch S [--workers URL ...]``: :func:`watch` of
    :func:`take_snapshot`."""
    return watch(lambda: take_snapshot(ctl, switches, worker_urls), interval, rounds=rounds, out=out)


class SnapshotCollector:
    """Prometheus collector of the switches' counters as the controller reads them.

    Each scrape calls ``take()`` (e.g. ``lambda: take_snapshot(ctl)``) and yields
    ``netco_job_contributions_total``/``results``/``resent`` (labels ``switch``, ``job``,
    ``job_id``), ``netco_switch_drops_total`` (``switch``, ``reason``),
    ``netco_switch_rate_limit_trips_total`` (``switch``) and ``netco_switch_reachable``.
    """

    def __init__(self, take: Callable[[], Snapshot]) -> None:
        self.take = take

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        snap = self.take()
        for name in JOB_COUNTER_NAMES:
            m = CounterMetricFamily(f"netco_job_{name}", f"ingress counter {name} of the job, "
                                    "read over P4Runtime", labels=["switch", "job", "job_id"])
            for j in snap.jobs:
                v = getattr(j, name)
                if v is not None:
                    m.add_metric([j.switch, j.job, str(j.job_id)], float(v))
            yield m
        d = CounterMetricFamily("netco_switch_drops", "ingress.drops by reason, read over P4Runtime",
                                labels=["switch", "reason"])
        up = GaugeMetricFamily("netco_switch_reachable", "1 when the switch answered the read",
                               labels=["switch"])
        trips = CounterMetricFamily("netco_switch_rate_limit_trips", "Times a source was held by "
                                    "the rate limit (ingress.rate_limit.trips, read over P4Runtime)",
                                    labels=["switch"])
        for s in snap.switches:
            up.add_metric([s.switch], 1.0 if s.reachable else 0.0)
            for reason, n in s.drops.items():
                d.add_metric([s.switch, reason], float(n))
            if s.rate_limit_trips is not None:
                trips.add_metric([s.switch], float(s.rate_limit_trips))
        yield d
        yield up
        yield trips
