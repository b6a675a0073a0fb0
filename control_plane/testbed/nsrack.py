"""A rack of network namespaces with shaped host links; no Mininet, rootless-capable.

Built inside a private network namespace (:mod:`control_plane.testbed.isolate`), which becomes
the rack's **switch namespace**: it holds one veth port per worker (``swp1..N``), the software
target (``python -m host.softswitch``, one UDP port per worker bound to the switch's address
on that worker's link) and the controller that configures it over P4Runtime on 127.0.0.1.
Worker ``r`` lives in its own named namespace ``h{r+1}`` (``eth0``, ``10.77.{r+1}.2/24``,
default route via the switch's ``10.77.{r+1}.1``).

Every host link is shaped with ``tc tbf`` on **both** egresses: the host's ``eth0`` (uplink)
and the switch port (downlink), so every byte a worker sends or receives crosses a link of
``link_mbps``. THC datagrams go to the software target's UDP port on the switch's address;
all other IP traffic between hosts (gloo's TCP for the fp32, fp16 and PowerSGD baselines) is
routed by the switch namespace's kernel (``ip_forward``): the software target does not forward
TCP, and would not at line rate. Both paths cross the same shaped host links.

The shaping is verified before use: one bulk TCP transfer per link and direction (all links at
once), whose goodput must lie within a tolerance of the configured rate (:func:`check_rates`).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass

from host.netns import in_netns

log = logging.getLogger(__name__)

SUBNET = "10.77"
#: TCP port of the rate probes (inside the rack's namespaces only).
PROBE_PORT = 5201
#: TCP goodput over Ethernet/IPv4/TCP with timestamps: 1448 payload bytes per 1514-byte frame.
TCP_EFFICIENCY = 1448 / 1514


class ShapingError(RuntimeError):
    """A shaped link does not carry the configured rate (measured too fast or too slow)."""


@dataclass(frozen=True)
class RackHost:
    """One worker host of the rack."""

    rank: int
    netns: str
    ifname: str
    ip: str
    switch_port: str
    switch_ip: str

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"


def tbf_args(mbps: float) -> list[str]:
    """``tc qdisc`` arguments of a token bucket at ``mbps`` Mbit/s.

    The bucket holds 4 ms of traffic (at least 64 KiB, so that a TSO/GSO super-frame passes
    unsplit) and the queue 50 ms.
    """
    rate_bytes = mbps * 1e6 / 8
    burst = int(max(64 * 1024, rate_bytes * 0.004))
    return ["tbf", "rate", f"{mbps:g}mbit", "burst", str(burst), "latency", "50ms"]


def _run(cmd: list[str]) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip() or res.returncode}")
    return res.stdout


class NamespaceRack:
    """``workers`` host namespaces around this process's namespace, links shaped to ``link_mbps``.

    Parameters
    ----------
    workers : int
        Hosts (1..32).
    link_mbps : float or None
        Rate of every host link, both directions; None leaves the links unshaped.
    verify : bool
        Measure every link before use (:meth:`verify`); a link out of tolerance raises
        :class:`ShapingError` and tears the rack down.
    num_slots : int
        Slots of the THC job at the software target.
    switch : bool
        Start the software target and configure it (False: links and routing only).

    Must run inside :func:`control_plane.testbed.isolate.run_isolated` (it configures the
    current network namespace as the switch: addresses, forwarding, qdiscs).
    """

    def __init__(self, workers: int = 4, link_mbps: float | None = 100.0, *, verify: bool = True,
                 num_slots: int = 64, switch: bool = True, job_id: int = 1) -> None:
        from control_plane.testbed.isolate import is_isolated

        if not 1 <= workers <= 32:
            raise ValueError(f"workers={workers}: a namespace rack holds 1..32 hosts")
        if link_mbps is not None and not link_mbps > 0:
            raise ValueError(f"link_mbps={link_mbps}: must be > 0")
        if not is_isolated():
            raise RuntimeError("NamespaceRack configures the current network namespace as the "
                               "switch: build it through control_plane.testbed.isolate.run_isolated")
        self.workers = workers
        self.link_mbps = link_mbps
        self.verify_links = verify
        self.num_slots = num_slots
        self.with_switch = switch
        self.job_id = job_id
        self.hosts = [RackHost(r, f"h{r + 1}", "eth0", f"{SUBNET}.{r + 1}.2", f"swp{r + 1}",
                               f"{SUBNET}.{r + 1}.1") for r in range(workers)]
        self.embedded = None
        self.measured: dict[str, dict[str, float]] = {}
        self._made: list[str] = []

    # -- lifecycle ------------------------------------------------------------------------
    def up(self) -> dict:
        """Build, shape, verify, start the switch; return :meth:`report`."""
        try:
            self._build()
            if self.link_mbps is not None and self.verify_links:
                self.verify()
            if self.with_switch:
                self._start_switch()
        except BaseException:
            self.down()
            raise
        return self.report()

    def _build(self) -> None:
        _run(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        for h in self.hosts:
            _run(["ip", "netns", "add", h.netns])
            self._made.append(h.netns)
            _run(["ip", "link", "add", h.switch_port, "type", "veth", "peer", "name", h.ifname,
                  "netns", h.netns])
            _run(["ip", "addr", "add", f"{h.switch_ip}/24", "dev", h.switch_port])
            _run(["ip", "link", "set", h.switch_port, "up"])
            n = ["ip", "-n", h.netns]
            _run([*n, "link", "set", "lo", "up"])
            _run([*n, "addr", "add", f"{h.ip}/24", "dev", h.ifname])
            _run([*n, "link", "set", h.ifname, "up"])
            _run([*n, "route", "add", "default", "via", h.switch_ip])
            if self.link_mbps is not None:
                _run(["tc", "qdisc", "replace", "dev", h.switch_port, "root",
                      *tbf_args(self.link_mbps)])
                _run(["tc", "-n", h.netns, "qdisc", "replace", "dev", h.ifname, "root",
                      *tbf_args(self.link_mbps)])
        log.info("namespace rack: %d hosts, links %s Mbit/s", self.workers, self.link_mbps)

    def _start_switch(self) -> None:
        from control_plane.embedded import EmbeddedNetwork

        self.embedded = EmbeddedNetwork(self.workers, job_id=self.job_id, num_slots=self.num_slots,
                                        switch_ips=[h.switch_ip for h in self.hosts],
                                        worker_ips=[h.ip for h in self.hosts])
        self.embedded.start()

    def down(self) -> None:
        """Stop the switch (by PID) and delete the host namespaces (their veths go with them)."""
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made.clear()

    def __enter__(self) -> NamespaceRack:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- what workers need ------------------------------------------------------------------
    @property
    def netns_paths(self) -> tuple[str, ...]:
        return tuple(h.netns_path for h in self.hosts)

    def network_spec(self, round_base: int | None = None, **kw):
        """The THC job as every worker reaches it (UDP to the switch's address on its link)."""
        from host.transport.job import NetworkSpec, session_round_base

        assert self.embedded is not None, "the rack was built without a switch"
        addrs = [self.embedded.address(r) for r in range(self.workers)]
        return NetworkSpec(tuple(a.switch for a in addrs), tuple(a.ip for a in addrs),
                           job_id=self.job_id, num_slots=self.num_slots,
                           round_base=round_base or session_round_base(),
                           token=self.embedded.token, **kw)

    def report(self) -> dict:
        return {"kind": "namespace rack", "rootless": os.environ.get("NETCO_ROOTLESS") == "1",
                "workers": self.workers, "link_mbps": self.link_mbps,
                "shaper": "tc tbf on both egresses of every host link" if self.link_mbps else None,
                "hosts": [{"netns": h.netns, "ip": h.ip, "switch_port": h.switch_port,
                           "switch_ip": h.switch_ip} for h in self.hosts],
                "measured_mbps": self.measured,
                "switch_pid": self.embedded.proc.pid if self.embedded and self.embedded.proc else None,
                "routing": "THC: software target (UDP); other IP traffic: the switch namespace's kernel"}

    def qdisc_stats(self) -> dict[str, dict]:
        """Bytes, packets and drops of every shaper (``tc -s -j qdisc``), by link and direction."""
        import json

        out: dict[str, dict] = {}
        for h in self.hosts:
            for direction, cmd in (("up", ["tc", "-n", h.netns, "-s", "-j", "qdisc", "show", "dev",
                                           h.ifname]),
                                   ("down", ["tc", "-s", "-j", "qdisc", "show", "dev", h.switch_port])):
                q = next((q for q in json.loads(_run(cmd)) if q.get("kind") == "tbf"), None)
                if q is not None:
                    out.setdefault(h.netns, {})[direction] = {
                        "bytes": q.get("bytes"), "packets": q.get("packets"), "drops": q.get("drops")}
        return out

    # -- verification ---------------------------------------------------------------------
    def verify(self, seconds: float = 0.6) -> dict[str, dict[str, float]]:
        """Measure every link in both directions (bulk TCP) and check it against the rate.

        All links are measured at once; a link out of bounds is measured again alone (a busy
        CPU can slow a transfer, it cannot speed one up past the shaper) before
        :class:`ShapingError` is raised.
        """
        assert self.link_mbps is not None
        self.measured = measure_rates(self.hosts, self.link_mbps, seconds)
        for ns, direction in rate_problems(self.measured, self.link_mbps):
            host = next(h for h in self.hosts if h.netns == ns)
            again = measure_rates([host], self.link_mbps, seconds, directions=(direction,))
            self.measured[ns][direction] = again[ns][direction]
        check_rates(self.measured, self.link_mbps)
        return self.measured


def _receiver(sock: socket.socket, total: int, out: dict, key: str) -> None:
    conn, _ = sock.accept()
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
    sock.connect(addr)
    chunk = b"\0" * (1 << 20)
    left = total
    while left > 0:
        left -= sock.send(chunk[: min(left, len(chunk))])
    sock.shutdown(socket.SHUT_WR)
    sock.recv(1)  # wait for the receiver to close
    sock.close()


def measure_rates(hosts: list[RackHost], mbps: float, seconds: float = 0.6,
                  directions: tuple[str, ...] = ("up", "down")) -> dict[str, dict[str, float]]:
    """TCP goodput (Mbit/s) of every host link, up and down, all links at once.

    Up: host ``eth0`` -> the switch's address; down: switch -> host. Each transfer moves about
    ``seconds`` worth of the configured rate.
    """
    total = int(max(mbps * 1e6 / 8 * seconds, 1 << 20))
    out: dict[str, float] = {}
    threads = []
    for h in hosts:
        for direction in directions:
            rx_ns, rx_ip = (None, h.switch_ip) if direction == "up" else (h.netns_path, h.ip)
            tx_ns = h.netns_path if direction == "up" else None

            def listen(ip=rx_ip):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((ip, PROBE_PORT))
                s.listen(1)
                return s

            lsock = in_netns(rx_ns, listen)
            tsock = in_netns(tx_ns, socket.socket)
            key = f"{h.netns}/{direction}"
            threads.append(threading.Thread(target=_receiver, args=(lsock, total, out, key)))
            threads.append(threading.Thread(target=_sender, args=(tsock, (rx_ip, PROBE_PORT), total)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60 + 8 * total / (mbps * 1e6 / 8))
    res: dict[str, dict[str, float]] = {}
    for h in hosts:
        res[h.netns] = {d: round(out.get(f"{h.netns}/{d}", 0.0), 1) for d in directions}
    return res


#: Bounds of a verified link: TCP goodput at most this much above the shaped rate ...
RATE_HIGH = 1.15
#: ... and at least this much of it (a shared 2-core machine slows transfers; the shaper is
#: what must never be missing, which the upper bound catches).
RATE_LOW = 0.5


def rate_problems(measured: dict[str, dict[str, float]], mbps: float) -> list[tuple[str, str]]:
    """(namespace, direction) of every goodput outside the bounds of a ``mbps`` shaper."""
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


def rack_probe(workers: int = 4, link_mbps: float | None = 100.0,
               expect_mbps: float | None = None) -> dict:
    """Build a rack without a switch, measure its links, tear it down; return the report with
    the shapers' counters (``tbf``). Unshaped (``link_mbps=None``), the links are measured
    with transfers sized for ``expect_mbps``: what a missing shaper looks like."""
    with NamespaceRack(workers, link_mbps, switch=False) as rack:
        if link_mbps is None and expect_mbps:
            rack.measured = measure_rates(rack.hosts, expect_mbps)
        rep = rack.report()
        rep["tbf"] = rack.qdisc_stats()
    return rep
