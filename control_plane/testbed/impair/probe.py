"""Measure what a link really does to frames, and check it against what was asked.

Probe frames (EtherType 0x88B5, IEEE "local experimental") carry a run id, a sequence number
and the send time (``CLOCK_MONOTONIC``, shared by all network namespaces of the machine), so
one receiver counts losses, duplicates and reorderings and measures the one-way delay;
a second, back-to-back burst of large frames measures the rate. :func:`check` compares a
measurement with an :class:`~control_plane.testbed.impair.params.Impairment` and raises
:class:`~control_plane.testbed.impair.params.ImpairmentError` naming every impairment that is not
in effect.

Counts are judged with binomial bounds: asked for a fraction ``p`` of ``n`` frames, the count
must lie within ``n·p ± (4·sqrt(n·p·(1−p)) + 2)`` (a false alarm is rarer than 1 in 10⁴), and
:func:`probes_needed` sends enough frames that ``n·p ≥ 15``, so an impairment that is not there
cannot pass.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import socket
import statistics
import struct
import threading
import time
from dataclasses import dataclass, field

from control_plane.testbed.impair.params import Impairment, ImpairmentError

PROBE_ETHERTYPE = 0x88B5
MAGIC = b"NCPR"
_HDR = struct.Struct("!6s6sH4sIIQ")  # dst, src, type, magic, run, seq, t_ns
BROADCAST = b"\xff" * 6
#: A probe set larger than this is not sent (very small percentages are checked loosely).
MAX_PROBES = 20000
MIN_PROBES = 1000


def open_probe_socket(ifname: str) -> socket.socket:
    """AF_PACKET socket on ``ifname`` for probe frames only (call it in the right namespace)."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(PROBE_ETHERTYPE))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    s.bind((ifname, PROBE_ETHERTYPE))
    return s


@dataclass
class ProbeResult:
    """What the receiver saw of ``sent`` probes."""

    sent: int
    received: int = 0          # distinct probes
    duplicates: int = 0        # extra copies
    reordered: int = 0         # arrivals older than one already seen
    delays_ms: list[float] = field(default_factory=list)
    rate_mbps: float | None = None       # measured at the receiver (burst)
    send_rate_mbps: float | None = None  # what the sender managed during the burst

    @property
    def lost(self) -> int:
        return self.sent - self.received

    def pct(self, k: int, n: int | None = None) -> float:
        n = self.sent if n is None else n
        return 100.0 * k / n if n else 0.0

    def quantile(self, q: float) -> float:
        if not self.delays_ms:
            return math.nan
        d = sorted(self.delays_ms)
        return d[min(len(d) - 1, int(q * len(d)))]

    def to_dict(self) -> dict:
        out = {"sent": self.sent, "received": self.received, "lost": self.lost,
               "loss_pct": round(self.pct(self.lost), 3), "duplicates": self.duplicates,
               "dup_pct": round(self.pct(self.duplicates, self.received), 3),
               "reordered": self.reordered,
               "reorder_pct": round(self.pct(self.reordered, self.received), 3)}
        if self.delays_ms:
            out.update(delay_ms_p10=round(self.quantile(0.1), 3),
                       delay_ms_median=round(statistics.median(self.delays_ms), 3),
                       delay_ms_p90=round(self.quantile(0.9), 3))
        if self.rate_mbps is not None:
            out["rate_mbps"] = round(self.rate_mbps, 3)
            out["send_rate_mbps"] = round(self.send_rate_mbps or 0.0, 3)
        return out


def probes_needed(imp: Impairment) -> int:
    """Probe count that makes every asked percentage measurable (``n·p ≥ 15``)."""
    ps = [p for p in (imp.loss_pct, imp.dup_pct, imp.reorder_pct) if p > 0]
    if not ps:
        return MIN_PROBES
    return int(min(MAX_PROBES, max(MIN_PROBES, math.ceil(15 * 100.0 / min(ps)))))


def _send(sock: socket.socket, frame: bytes) -> bool:
    try:
        sock.send(frame)
        return True
    except OSError as exc:
        if exc.errno in (errno.ENOBUFS, errno.EAGAIN):
            return False
        raise


class _Receiver(threading.Thread):
    def __init__(self, sock: socket.socket, run: int) -> None:
        super().__init__(daemon=True, name="probe-rx")
        self.sock, self.run_id = sock, run
        self.arrivals: list[tuple[int, int, int, int]] = []  # (seq, t_sent, t_recv, size)
        self.stop = threading.Event()

    def run(self) -> None:
        self.sock.settimeout(0.02)
        while not self.stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            t = time.monotonic_ns()
            if len(data) < _HDR.size:
                continue
            _, _, _, magic, run, seq, t_ns = _HDR.unpack_from(data)
            if magic == MAGIC and run == self.run_id:
                self.arrivals.append((seq, t_ns, t, len(data)))

    def settle(self, quiet_s: float) -> None:
        """Wait for stragglers: until nothing new arrived for ``quiet_s``; then stop."""
        try:
            last_n, quiet_since = -1, time.monotonic()
            while time.monotonic() - quiet_since < quiet_s:
                n = len(self.arrivals)
                if n != last_n:
                    last_n, quiet_since = n, time.monotonic()
                time.sleep(0.02)
        finally:
            self.stop.set()
            self.join(2)


def _frame(src: bytes, run: int, seq: int, size: int) -> bytes:
    head = _HDR.pack(BROADCAST, src, PROBE_ETHERTYPE, MAGIC, run, seq, time.monotonic_ns())
    return head + bytes(max(0, size - len(head)))


def probe(tx: socket.socket, rx: socket.socket, count: int = 2000, rate_pps: float = 10000.0,
          size: int = 64, settle_s: float = 0.5, src_mac: bytes = b"\x02\x4e\x43\xff\xff\xfe"
          ) -> ProbeResult:
    """Send ``count`` probes on ``tx`` at ``rate_pps`` and count what arrives on ``rx``.

    The receiver keeps listening ``settle_s`` after the last send (plus the largest delay
    seen) for late and held frames.
    """
    run = int.from_bytes(os.urandom(4), "big")
    rcv = _Receiver(rx, run)
    rcv.start()
    res = ProbeResult(sent=0)
    try:
        t0 = time.monotonic()
        per_tick = max(1, int(rate_pps / 1000))  # bursts every millisecond
        seq = 0
        while seq < count:
            for _ in range(min(per_tick, count - seq)):
                while not _send(tx, _frame(src_mac, run, seq, size)):
                    time.sleep(0.0005)
                seq += 1
            target = t0 + seq / rate_pps
            pause = target - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        res.sent = count
    except BaseException:
        rcv.settle(0)
        raise
    rcv.settle(settle_s)
    seen: set[int] = set()
    top = -1
    for seq, t_sent, t_recv, _ in rcv.arrivals:
        if seq in seen:
            res.duplicates += 1
            continue
        seen.add(seq)
        if seq < top:
            res.reordered += 1
        top = max(top, seq)
        res.delays_ms.append((t_recv - t_sent) / 1e6)
    res.received = len(seen)
    return res


def measure_rate(tx: socket.socket, rx: socket.socket, rate_mbps: float, size: int = 1400,
                 duration_s: float = 0.3, max_bytes: int = 6 << 20,
                 src_mac: bytes = b"\x02\x4e\x43\xff\xff\xfe") -> tuple[float, float]:
    """Blast frames for about ``duration_s`` worth of ``rate_mbps`` and measure the arrival
    rate. Returns (received Mbit/s, sent Mbit/s)."""
    run = int.from_bytes(os.urandom(4), "big")
    total = int(min(max_bytes, max(rate_mbps * 1e6 / 8 * duration_s, 40 * size)))
    n = max(40, total // size)
    rcv = _Receiver(rx, run)
    rcv.start()
    try:
        t0 = time.monotonic()
        for seq in range(n):
            # a full queue refuses (ENOBUFS): that is the shaper working; count it as sent
            with contextlib.suppress(OSError):
                _send(tx, _frame(src_mac, run, seq, size))
        t_sent = time.monotonic() - t0
    except BaseException:
        rcv.settle(0)
        raise
    rcv.settle(0.3)
    send_rate = n * size * 8 / max(t_sent, 1e-6) / 1e6
    arr = sorted(rcv.arrivals, key=lambda a: a[2])
    if len(arr) < 3:
        return 0.0, send_rate
    # the first frames leave at line rate (the bucket's burst): measure from the tenth on
    skip = min(len(arr) // 4, 10)
    span = (arr[-1][2] - arr[skip][2]) / 1e9
    bits = sum(a[3] for a in arr[skip + 1:]) * 8
    return bits / max(span, 1e-6) / 1e6, send_rate


def _bounds(n: int, p: float) -> tuple[float, float]:
    sd = math.sqrt(max(n * p * (1 - p), 0.0))
    return n * p - 4 * sd - 2, n * p + 4 * sd + 2


def problems(imp: Impairment, res: ProbeResult, direction: str = "") -> list[str]:
    """Every asked impairment that ``res`` does not show (empty list: all in effect)."""
    out: list[str] = []
    where = f"{direction}: " if direction else ""
    if res.received == 0:
        return [f"{where}no probe arrived out of {res.sent}: the link does not pass frames"]
    if imp.loss_pct > 0:
        lo, hi = _bounds(res.sent, imp.loss_pct / 100)
        if not (lo <= res.lost <= hi and res.lost > 0):
            out.append(f"{where}loss asked {imp.loss_pct:g}%, measured {res.pct(res.lost):.2f}% "
                       f"({res.lost}/{res.sent}; expected {max(lo, 0):.0f}..{hi:.0f})")
    if imp.dup_pct > 0:
        lo, hi = _bounds(res.received, imp.dup_pct / 100)
        if not (lo <= res.duplicates <= hi and res.duplicates > 0):
            out.append(f"{where}duplication asked {imp.dup_pct:g}%, measured "
                       f"{res.pct(res.duplicates, res.received):.2f}% ({res.duplicates} copies)")
    if imp.reorder_pct > 0:
        lo, hi = _bounds(res.received, imp.reorder_pct / 100)
        if imp.jitter_ms > 0:
            hi = math.inf  # jitter reorders too
        if not (lo <= res.reordered <= hi and res.reordered > 0):
            out.append(f"{where}reordering asked {imp.reorder_pct:g}%, measured "
                       f"{res.pct(res.reordered, res.received):.2f}% ({res.reordered} frames)")
    if imp.delay_ms > 0 or imp.jitter_ms > 0:
        med = statistics.median(res.delays_ms)
        lo = imp.delay_ms - 0.5 - 0.2 * imp.jitter_ms
        # generous above: a user-space forwarder on a busy machine adds milliseconds; what must
        # never pass is a delay that is not there (the lower bound)
        hi = imp.delay_ms + imp.jitter_ms + max(30.0, imp.delay_ms)
        if not lo <= med <= hi:
            out.append(f"{where}delay asked {imp.delay_ms:g} ms, measured median {med:.2f} ms "
                       f"(expected {lo:.1f}..{hi:.1f})")
    if imp.jitter_ms >= 1.0:
        spread = res.quantile(0.9) - res.quantile(0.1)
        if spread < 0.8 * imp.jitter_ms:  # uniform ±J: p90 - p10 = 1.6 J
            out.append(f"{where}jitter asked ±{imp.jitter_ms:g} ms, measured p90-p10 spread "
                       f"{spread:.2f} ms (expected about {1.6 * imp.jitter_ms:.1f})")
    if imp.bandwidth_mbps is not None and res.rate_mbps is not None:
        r, cap = res.rate_mbps, imp.bandwidth_mbps
        if r > 1.3 * cap:
            out.append(f"{where}bandwidth asked {cap:g} Mbit/s, measured {r:.1f} Mbit/s (not capped)")
        elif (res.send_rate_mbps or 0) >= 1.5 * cap and r < 0.5 * cap:
            out.append(f"{where}bandwidth asked {cap:g} Mbit/s, measured only {r:.1f} Mbit/s")
    return out


def check(imp: Impairment, results: dict[str, ProbeResult], link: str = "") -> None:
    """Raise :class:`ImpairmentError` unless every direction in ``results`` shows ``imp``."""
    found = [p for d, r in results.items() for p in problems(imp, r, d)]
    if found:
        head = f"link {link}: " if link else ""
        raise ImpairmentError(f"{head}impairment {imp.describe()!r} not in effect: " + "; ".join(found))


def measure(imp: Impairment, tx: socket.socket, rx: socket.socket) -> ProbeResult:
    """Probe one direction as :func:`check` needs it: counts, delays and (if capped) rate."""
    rate_pps = 5000.0
    if imp.bandwidth_mbps is not None:  # keep the probes' own load at a third of the cap
        rate_pps = min(rate_pps, imp.bandwidth_mbps * 1e6 / 3 / (64 * 8))
    count = probes_needed(imp)
    if imp.bandwidth_mbps is not None:
        count = min(count, max(200, int(rate_pps * 3)))  # at most ~3 s
    res = probe(tx, rx, count=count, rate_pps=rate_pps,
                settle_s=0.3 + (imp.delay_ms + imp.jitter_ms + imp.reorder_gap_ms) / 1000)
    if imp.bandwidth_mbps is not None:
        res.rate_mbps, res.send_rate_mbps = measure_rate(tx, rx, imp.bandwidth_mbps)
    return res
