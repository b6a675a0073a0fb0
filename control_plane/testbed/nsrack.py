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

The shaping is verified before use (:mod:`control_plane.testbed.shaping`, shared with the
Mininet testbeds): a ``tbf`` of the rate on every egress, and one bulk TCP transfer per link
and direction (all links at once) whose goodput must lie within a tolerance of the configured
rate (:func:`~control_plane.testbed.shaping.check_rates`).
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass

from control_plane.testbed.rack import Rack
from control_plane.testbed.shaping import (
    Flow,
    ShapedEnd,
    ShapingError,
    check_rates,
    measure_flows,
    qdisc_stats,
    rate_problems,
    tbf_args,
    verify_flows,
)

log = logging.getLogger(__name__)

SUBNET = "10.77"

__all__ = ["NamespaceRack", "RackHost", "ShapingError", "check_rates", "rack_probe",
           "rate_problems", "tbf_args"]


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


def _run(cmd: list[str]) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip() or res.returncode}")
    return res.stdout


class NamespaceRack(Rack):
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
    granularity : int
        THC g of the job the controller installs (its table; the lane width follows from
        ``workers·g``); :meth:`network_spec` hands the same to the workers.

    Must run inside :func:`control_plane.testbed.isolate.run_isolated` (it configures the
    current network namespace as the switch: addresses, forwarding, qdiscs).
    """

    def __init__(self, workers: int = 4, link_mbps: float | None = 100.0, *, verify: bool = True,
                 num_slots: int = 64, switch: bool = True, job_id: int = 1,
                 granularity: int = 30) -> None:
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
        self.granularity = granularity
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
        from control_plane.embedded import EmbeddedNetwork, job_width

        self.embedded = EmbeddedNetwork(self.workers, job_id=self.job_id, num_slots=self.num_slots,
                                        thc={"g": self.granularity},
                                        coords_per_packet=job_width(self.workers, self.granularity),
                                        switch_ips=[h.switch_ip for h in self.hosts],
                                        worker_ips=[h.ip for h in self.hosts], worker_port=None)
        self.embedded.start()

    def down(self) -> None:
        """Stop the switch (by PID) and delete the host namespaces (their veths go with them)."""
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made.clear()

    # -- what workers need ------------------------------------------------------------------
    @property
    def netns_paths(self) -> tuple[str, ...]:
        return tuple(h.netns_path for h in self.hosts)

    def network_spec(self, round_base: int | None = None, **kw):
        """The THC job as every worker reaches it (UDP to the switch's address on its link)."""
        from host.transport.job import session_round_base

        assert self.embedded is not None, "the rack was built without a switch"
        return self.embedded.network_spec(round_base=round_base or session_round_base(), **kw)

    def report(self) -> dict:
        return {"kind": "namespace rack", "rootless": os.environ.get("NETCO_ROOTLESS") == "1",
                "workers": self.workers, "link_mbps": self.link_mbps,
                "shaper": "tc tbf on both egresses of every host link" if self.link_mbps else None,
                "hosts": [{"netns": h.netns, "ip": h.ip, "switch_port": h.switch_port,
                           "switch_ip": h.switch_ip} for h in self.hosts],
                "measured_mbps": self.measured,
                "switch_pid": self.embedded.proc.pid if self.embedded and self.embedded.proc else None,
                "routing": "THC: software target (UDP); other IP traffic: the switch namespace's kernel"}

    def shaped_ends(self) -> list[ShapedEnd]:
        """Every shaped egress: each host's ``eth0`` (up) and its switch port (down)."""
        return [e for h in self.hosts for e in (ShapedEnd(h.netns, "up", h.netns_path, h.ifname),
                                                ShapedEnd(h.netns, "down", None, h.switch_port))]

    def flows(self, directions: tuple[str, ...] = ("up", "down")) -> list[Flow]:
        """One TCP transfer per link and direction: host ↔ the switch's address on its link."""
        out = []
        for h in self.hosts:
            if "up" in directions:
                out.append(Flow(((h.netns, "up"),), h.netns_path, None, h.switch_ip))
            if "down" in directions:
                out.append(Flow(((h.netns, "down"),), None, h.netns_path, h.ip))
        return out

    def qdisc_stats(self) -> dict[str, dict]:
        """Bytes, packets and drops of every shaper, by link and direction."""
        return qdisc_stats(self.shaped_ends())

    @property
    def ifname(self) -> str:
        """The hosts' interface (gloo binds it)."""
        return "eth0"

    def switch_status(self) -> list[dict]:
        """The software target's job status (JSON-ready)."""
        return [s.to_json() for s in self.embedded.status()] if self.embedded else []

    # -- verification ---------------------------------------------------------------------
    def verify(self, seconds: float = 0.6) -> dict[str, dict[str, float]]:
        """Check every shaper and measure every link in both directions (bulk TCP, all at
        once; :func:`control_plane.testbed.shaping.verify_flows`)."""
        assert self.link_mbps is not None
        self.measured = verify_flows(self.flows(), self.link_mbps, seconds, self.shaped_ends())
        return self.measured


def rack_probe(workers: int = 4, link_mbps: float | None = 100.0,
               expect_mbps: float | None = None) -> dict:
    """Build a rack without a switch, measure its links, tear it down; return the report with
    the shapers' counters (``tbf``). Unshaped (``link_mbps=None``), the links are measured
    with transfers sized for ``expect_mbps``: what a missing shaper looks like."""
    with NamespaceRack(workers, link_mbps, switch=False) as rack:
        if link_mbps is None and expect_mbps:
            rack.measured = measure_flows(rack.flows(), expect_mbps)
        rep = rack.report()
        rep["tbf"] = rack.qdisc_stats()
    return rep
