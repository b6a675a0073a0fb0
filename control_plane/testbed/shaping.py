"""Shaped links: the token bucket, and the check that it is in effect (every testbed's).

One implementation for every testbed that shapes its host links (the namespace rack,
:mod:`control_plane.testbed.nsrack`; the Mininet rack and two buildings,
:mod:`control_plane.testbed.net` with ``link_mbps``):

* :func:`tbf_args` — the ``tc qdisc`` arguments of a token bucket at a rate;
* :func:`check_shapers` — every shaped egress (:class:`ShapedEnd`) carries a ``tbf`` of that
  rate (``tc -j qdisc``): a missing or mis-configured shaper fails before anything is timed;
* :func:`verify_flows` — bulk TCP transfers (:class:`Flow`, all at once) whose goodput must lie
  between :data:`RATE_LOW` and :data:`RATE_HIGH` times what a TCP flow gets from the shaper;
  a link out of bounds is measured again alone (a busy CPU can slow a transfer, it cannot speed
  one up past the shaper) before :class:`ShapingError` is raised;
* :func:`qdisc_stats` — bytes, packets and drops of every shaper after a run: proof that the
  run's bytes went through them.

A flow measures the links it crosses: on the namespace rack, host ↔ the switch namespace's
address (one link, one direction per flow); on a Mininet testbed, host → host routed by the
switch program (the sender's uplink and the receiver's downlink), the path the baselines'
gloo traffic takes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from dataclasses import dataclass

from host.netns import in_netns, netns_path

#: TCP port of the rate probes (inside the testbeds' namespaces only).
PROBE_PORT = 5201
#: TCP goodput over Ethernet/IPv4/TCP with timestamps: 1448 payload bytes per 1514-byte frame.
TCP_EFFICIENCY = 1448 / 1514
#: Bounds of a verified link: TCP goodput at most this much above the shaped rate ...
RATE_HIGH = 1.15
#: ... and at least this much of it (a shared 2-core machine slows transfers; the shaper is
#: what must never be missing, which the upper bound and :func:`check_shapers` catch).
RATE_LOW = 0.5


class ShapingError(RuntimeError):
    """A shaped link does not carry the configured rate (shaper missing, measured too fast or
    too slow)."""


def tbf_args(mbps: float) -> list[str]:
    """``tc qdisc`` arguments of a token bucket at ``mbps`` Mbit/s.

    The bucket holds 4 ms of traffic (at least 64 KiB, so that a TSO/GSO super-frame passes
    unsplit) and the queue 50 ms.
    """
    rate_bytes = mbps * 1e6 / 8
    burst = int(max(64 * 1024, rate_bytes * 0.004))
    return ["tbf", "rate", f"{mbps:g}mbit", "burst", str(burst), "latency", "50ms"]


@dataclass(frozen=True)
class ShapedEnd:
    """One shaped egress: link ``link``'s direction ``direction`` leaves through ``dev`` in
    namespace ``netns`` (a path, an ``ip netns`` name, a PID; None: this process's)."""

    link: str
    direction: str
    netns: str | int | None
    dev: str


@dataclass(frozen=True)
class Flow:
    """One bulk TCP transfer from namespace ``tx_ns`` to ``rx_ip`` in ``rx_ns``; its goodput is
    the measurement of every ``(link, direction)`` in ``keys``."""

    keys: tuple[tuple[str, str], ...]
    tx_ns: str | int | None
    rx_ns: str | int | None
    rx_ip: str


def _tc(end: ShapedEnd) -> list[dict]:
    cmd = ["tc", "-s", "-j", "qdisc", "show", "dev", end.dev]
    if end.netns is not None:
        cmd = ["nsenter", f"--net={netns_path(end.netns)}", *cmd]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise ShapingError(f"link {end.link} {end.direction}: {' '.join(cmd)}: "
                           f"{res.stderr.strip() or res.returncode}")
    return json.loads(res.stdout or "[]")


def _tbf(end: ShapedEnd) -> dict | None:
    return next((q for q in _tc(end) if q.get("kind") == "tbf"), None)


def check_shapers(ends: list[ShapedEnd], mbps: float) -> None:
    """Raise :class:`ShapingError` unless every end's root qdisc is a ``tbf`` at ``mbps``."""
    bad = []
    for e in ends:
        q = _tbf(e)
        rate = (q or {}).get("options", {}).get("rate")
        if q is None:
            bad.append(f"{e.link} {e.direction} ({e.dev}): no tbf")
        elif rate is not None and abs(rate * 8 / 1e6 - mbps) > 0.01 * mbps:
            bad.append(f"{e.link} {e.direction} ({e.dev}): tbf at {rate * 8 / 1e6:g} Mbit/s")
    if bad:
        raise ShapingError(f"links to be shaped to {mbps:g} Mbit/s: {', '.join(bad)}")


def qdisc_stats(ends: list[ShapedEnd]) -> dict[str, dict]:
    """Bytes, packets and drops of every end's shaper (``tc -s -j qdisc``), by link and
    direction (ends without a tbf are left out)."""
    out: dict[str, dict] = {}
    for e in ends:
        q = _tbf(e)
        if q is not None:
            out.setdefault(e.link, {})[e.direction] = {
                "bytes": q.get("bytes"), "packets": q.get("packets"), "drops": q.get("drops")}
    return out


# -- measuring --------------------------------------------------------------------------------
def _receiver(sock: socket.socket, total: int, out: dict, key: int) -> None:
    sock.settimeout(60)
    try:
        conn, _ = sock.accept()
    except OSError:
        return
    finally:
        sock.close()
    with conn:
        got, marks = 0, []
        buf = bytearray(1 << 20)
        while got < total:
            k = conn.recv_into(buf)
            if k == 0:
                break
            got += k
            marks.append((time.perf_counter(), got))
    # from the first quarter on: the bucket's burst and TCP's slow start are over by then
    start = next((m for m in marks if m[1] >= total // 4), marks[0] if marks else (0.0, 0))
    end = marks[-1] if marks else (0.0, 0)
    span = end[0] - start[0]
    out[key] = (end[1] - start[1]) * 8 / span / 1e6 if span > 0 else 0.0


def _sender(sock: socket.socket, addr: tuple[str, int], total: int) -> None:
    try:
        sock.settimeout(60)
        sock.connect(addr)
        chunk = b"\0" * (1 << 20)
        left = total
        while left > 0:
            left -= sock.send(chunk[: min(left, len(chunk))])
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)  # wait for the receiver to close
    except OSError:
        pass  # the receiver reports what arrived
    finally:
        sock.close()


def measure_flows(flows: list[Flow], mbps: float, seconds: float = 0.6
                  ) -> dict[str, dict[str, float]]:
    """TCP goodput (Mbit/s) of every flow, all at once, by the ``(link, direction)`` keys each
    measures. Each transfer moves about ``seconds`` worth of ``mbps``."""
    total = int(max(mbps * 1e6 / 8 * seconds, 1 << 20))
    got: dict[int, float] = {}
    threads = []
    for i, f in enumerate(flows):
        def listen(ip: str = f.rx_ip) -> socket.socket:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip, PROBE_PORT))
            s.listen(1)
            return s

        lsock = in_netns(f.rx_ns, listen)
        tsock = in_netns(f.tx_ns, socket.socket)
        threads.append(threading.Thread(target=_receiver, args=(lsock, total, got, i)))
        threads.append(threading.Thread(target=_sender, args=(tsock, (f.rx_ip, PROBE_PORT), total)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60 + 8 * total / (mbps * 1e6 / 8))
    res: dict[str, dict[str, float]] = {}
    for i, f in enumerate(flows):
        for link, direction in f.keys:
            res.setdefault(link, {})[direction] = round(got.get(i, 0.0), 1)
    return res


def rate_problems(measured: dict[str, dict[str, float]], mbps: float) -> list[tuple[str, str]]:
    """(link, direction) of every goodput outside the bounds of a ``mbps`` shaper."""
    expect = mbps * TCP_EFFICIENCY
    return [(ns, d) for ns, dirs in measured.items() for d, v in dirs.items()
            if not RATE_LOW * expect <= v <= RATE_HIGH * expect]


def check_rates(measured: dict[str, dict[str, float]], mbps: float) -> None:
    """Raise :class:`ShapingError` unless every measured goodput lies between ``RATE_LOW`` and
    ``RATE_HIGH`` times what a TCP flow gets from a ``mbps`` shaper (``mbps · 1448/1514``)."""
    bad = rate_problems(measured, mbps)
    if bad:
        expect = mbps * TCP_EFFICIENCY
        what = ", ".join(f"{ns} {d} {measured[ns][d]:.1f} Mbit/s" for ns, d in bad)
        raise ShapingError(f"links shaped to {mbps:g} Mbit/s (TCP goodput {expect:.1f}) measured "
                           f"outside {RATE_LOW:g}..{RATE_HIGH:g}x: {what}")


def verify_flows(flows: list[Flow], mbps: float, seconds: float = 0.6,
                 ends: list[ShapedEnd] | None = None) -> dict[str, dict[str, float]]:
    """Check the shapers (:func:`check_shapers` on ``ends``), measure every flow at once and
    check the rates; a flow with a link out of bounds is measured again alone first.

    Returns the measured goodputs by link and direction; raises :class:`ShapingError`.
    """
    if ends:
        check_shapers(ends, mbps)
    measured = measure_flows(flows, mbps, seconds)
    bad = set(rate_problems(measured, mbps))
    for f in flows:
        if bad.intersection(f.keys):
            again = measure_flows([f], mbps, seconds)
            for link, direction in f.keys:
                measured[link][direction] = again[link][direction]
    check_rates(measured, mbps)
    return measured
