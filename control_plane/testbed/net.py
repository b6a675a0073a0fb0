"""A Mininet testbed built from the controller's topology file: up, verify, down.

:class:`Testbed` is the Python API (the tests and ``netco testbed`` use it); the workloads it
runs once up (all-reduces, worker processes) are in :mod:`control_plane.testbed.workload`::

    with Testbed("mininet/rack.yaml", workdir=tmp) as tb:     # up() ... down()
        tb.report["target"]                                     # "softswitch" or "bmv2"
        tb.ping("h1", "h2")
        outs = tb.allreduce("rack", tensors)                    # THC through the switch

``up`` in order: check root, tools and that every root-namespace name and P4Runtime port is
free; build the Mininet network (switch nodes in the root namespace, hosts and impairment
nodes in their own; no OpenFlow controller, no Open vSwitch, no ``TCLink``); address the
hosts (``IP/32``, gateway = attachment switch's ``addr`` with a static ARP entry; IPv6 and
checksum/segmentation offloads off, because the switches forward raw frames that must carry
complete checksums; with ``link_mbps``, a ``tc tbf`` on both egresses of every host link);
set up every impairment node (:mod:`control_plane.testbed.impair.node`); **measure every
impaired link in both directions with probe frames and raise if anything asked for is not in
effect** (before any switch runs, so probes meet no program); start the switch processes and
wait for their P4Runtime ports; apply the file with the controller
(:class:`control_plane.controller.Controller`); with ``link_mbps``, **verify the host links'
shaping** as the namespace rack does (:mod:`control_plane.testbed.shaping`: a ``tbf`` of the
rate on every egress, and TCP transfers host → host, routed by the switches, within bounds of
the rate), raising :class:`~control_plane.testbed.shaping.ShapingError` otherwise.

``down`` stops exactly what ``up`` started — its forwarder and switch processes by PID,
its Mininet nodes and links (``Mininet.stop`` on its own object) — then deletes any of its own
root-namespace interfaces that are left. It never calls Mininet's global cleanup
(``mn -c``), which kills processes by name on the whole machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from control_plane.config import NetworkConfig, load_config
from control_plane.testbed import kernelroute
from control_plane.testbed.impair import node as impnode
from control_plane.testbed.impair.params import Impairment, ImpairmentError
from control_plane.testbed.impair.probe import ProbeResult, check, measure, open_probe_socket
from control_plane.testbed.plan import LinkPlan, TestbedPlan, make_plan
from control_plane.testbed.shaping import Flow, ShapedEnd, qdisc_stats, tbf_args, verify_flows
from control_plane.testbed.targets import (
    TestbedError,
    choose_target,
    spawn,
    stop_process,
    switch_class,
    switch_command,
)
from control_plane.testbed.workload import TestbedWorkloads
from host.protocol.layout import THC_UDP_PORT
from host.tools import MININET_TESTBED, MissingToolError, require, require_command

log = logging.getLogger(__name__)

__all__ = ["Testbed", "TestbedError", "with_free_ports"]

HOST_NFT = f"""table inet netco_host {{
  chain input {{ type filter hook input priority 0; policy accept;
    udp dport {THC_UDP_PORT} drop
  }}
}}
"""


def _run(argv: list[str], stdin: str | None = None, timeout: float = 20.0) -> str:
    require_command(argv)   # a missing tool names its package (MissingToolError), not ENOENT
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {(p.stderr or p.stdout).strip()}")
    return p.stdout


def _in(pid: int):
    """Runner for commands inside the namespaces of process ``pid`` (a Mininet node)."""
    def run(argv: list[str], stdin: str | None = None) -> str:
        require_command(argv)   # mnexec would only say "No such file or directory"
        return _run(["mnexec", "-a", str(pid), *argv], stdin)
    return run


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def with_free_ports(cfg: NetworkConfig) -> NetworkConfig:
    """``cfg`` with every switch's P4Runtime address moved to a free port on 127.0.0.1 (for
    tests and parallel runs of one file)."""
    out = []
    for s in cfg.switches:
        with socket.socket() as so:
            so.bind(("127.0.0.1", 0))
            out.append(dataclasses.replace(s, address=f"127.0.0.1:{so.getsockname()[1]}"))
    return dataclasses.replace(cfg, switches=tuple(out))


def free_ports(n: int, avoid: Collection[int] = ()) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1, none of them in ``avoid``.

    The sockets stay bound until all are chosen, so two picks cannot return the same port; a
    port in ``avoid`` (another switch's P4Runtime port, chosen and released earlier: the kernel
    may hand it out again) is skipped. A BMv2 whose Thrift port equalled its own gRPC port
    never opened P4Runtime ("Could not bind: Address already in use").
    """
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            so = socket.socket()
            held.append(so)
            so.bind(("127.0.0.1", 0))
            port = so.getsockname()[1]
            if port not in avoid:
                ports.append(port)
    finally:
        for so in held:
            so.close()
    return ports


def _wait_port(port: int, proc: subprocess.Popen, timeout: float, what: str, log_path: Path) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            tail = log_path.read_text()[-1500:] if log_path.exists() else ""
            raise TestbedError(f"{what} exited with code {proc.returncode} while starting:\n{tail}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TestbedError(f"{what}: P4Runtime port {port} not open after {timeout:g} s (log: {log_path})")


def _offloads_off(run, dev: str) -> None:
    # Raw-frame switches copy frames verbatim: a checksum left to "hardware" would stay wrong
    # (ethtool is required: Testbed.preflight).
    with contextlib.suppress(RuntimeError):
        run(["ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"])


class Testbed(TestbedWorkloads):
    """A Mininet testbed of the topology file ``topo``.

    Parameters
    ----------
    topo : path or NetworkConfig
        The controller's desired-state file (``mininet/*.yaml``) or its parsed form.
    target : {"auto", "softswitch", "bmv2"}
        Switch program (:func:`control_plane.testbed.targets.choose_target`).
    tag : str, optional
        Prefix of the root-namespace names (default ``nt`` + 3 digits of the PID).
    workdir : path, optional
        Logs, forwarder statistics (default: a fresh temporary directory).
    apply : bool
        Apply the file with the controller once the switches run.
    verify : bool
        Measure every impaired link (turning this off is only for debugging).
    impairments : dict, optional
        Extra/overriding impairments per link label ``"a:port-b:port"`` (jitter, duplication,
        reordering, which the file has no fields for).
    force_mode : str, optional
        Impairment node mode for every impaired link instead of the automatic choice
        (``netem``/``bridge``/``forwarder``; for testing the check).
    seed : int
        Seed of the impairments' random decisions.
    link_mbps : float, optional
        Shape every host link to this rate, both directions (``tc tbf`` on the host's ``eth0``
        and on its switch port), and verify it once the switches route
        (:meth:`verify_shaping`). None (default): host links unshaped.
    kernel_routes : bool
        With ``link_mbps``: give every switch a kernel router on the same ports and every host
        a gloo interface routed by them (:mod:`control_plane.testbed.kernelroute`), so the
        baselines' TCP crosses the shaped links at their rate rather than at the software
        target's forwarding rate. False: ordinary IPv4 only through the switch program.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, topo: str | Path | NetworkConfig, target: str = "auto", tag: str | None = None,
                 workdir: str | Path | None = None, apply: bool = True, verify: bool = True,
                 impairments: dict[str, Impairment] | None = None, force_mode: str | None = None,
                 seed: int = 0, python: str = sys.executable, link_mbps: float | None = None,
                 kernel_routes: bool = True) -> None:
        self.topo_path = None if isinstance(topo, NetworkConfig) else Path(topo)
        self.cfg = topo if isinstance(topo, NetworkConfig) else load_config(topo)
        self.tag = tag or f"nt{os.getpid() % 1000:03d}"
        self.plan: TestbedPlan = make_plan(self.cfg, self.tag, seed, impairments)
        self.choice = choose_target(target, self.cfg.controller.bmv2_json)
        #: job id -> the job's token as installed by the last apply (workers' JobSpec.token)
        self.tokens: dict[int, int] = {}
        self.cfg_eff = dataclasses.replace(self.cfg, switches=tuple(
            dataclasses.replace(s, target=self.choice.target) for s in self.cfg.switches))
        if force_mode is not None and force_mode not in impnode.MODES:
            raise TestbedError(f"force_mode {force_mode!r}: use one of {impnode.MODES}")
        self.force_mode = force_mode
        if link_mbps is not None and not link_mbps > 0:
            raise TestbedError(f"link_mbps={link_mbps}: must be > 0 (Mbit/s per host link)")
        self.link_mbps = link_mbps
        self.kernel_routes = kernel_routes and link_mbps is not None
        #: with kernel routes: host → its gloo address (on :data:`kernelroute.GLOO_IF`)
        self.gloo_ips: dict[str, str] = {}
        #: measured TCP goodput of every shaped host link, by host and direction
        self.measured_mbps: dict[str, dict[str, float]] = {}
        self.apply_config = apply
        self.verify = verify
        self.python = python
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"netco-{self.tag}-"))
        self.net: Any = None
        self.forwarders: dict[str, subprocess.Popen] = {}
        self.modes: dict[str, str] = {}
        self.measured: dict[str, dict[str, ProbeResult]] = {}
        self.report: dict[str, Any] = {}
        self._endpoints: list = []
        self._lock = threading.Lock()
        self._used_jobs: set[str] = set()
        #: warnings about what this testbed could not do (missing optional tools)
        self.notes: list[str] = []
        self.netem: bool | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Testbed:
        self.up()
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def preflight(self) -> None:
        """Refuse to start unless root, tools present and every name/port is free."""
        if os.geteuid() != 0:
            raise TestbedError("a Mininet testbed needs root (network namespaces, raw sockets)")
        try:
            import mininet.net  # noqa: F401
        except ImportError as exc:
            raise TestbedError("Mininet is not importable: apt-get install mininet; in a venv add "
                               "/usr/lib/python3/dist-packages via a .pth file (./dev.sh does)") from exc
        # ethtool: checksum offloads off (else ordinary TCP/UDP through the raw-frame switches
        # arrives with bad checksums: gloo ranks go missing); nft: hosts must not answer THC
        # results with ICMP port unreachable, and lossy links without delay need its drop rule
        try:
            require(*MININET_TESTBED, why="by a Mininet testbed")
        except MissingToolError as exc:
            raise TestbedError(str(exc)) from None
        taken = [i for i in self.plan.root_interfaces if Path(f"/sys/class/net/{i}").exists()]
        if taken:
            raise TestbedError(f"interfaces {', '.join(taken)} already exist: another testbed with tag "
                               f"{self.tag!r} is up (netco testbed down) or pick another tag")
        for s, spec in zip(self.plan.switches, self.cfg.switches, strict=True):
            if not _port_free(s.grpc_port):
                raise TestbedError(f"switches[{s.index}].address: port {s.grpc_port} on 127.0.0.1 is "
                                   f"in use; stop what listens there or change {spec.name}'s address")

    def up(self) -> dict[str, Any]:
        """Build, verify, start and configure the network; returns :attr:`report`.

        On any failure everything started so far is stopped before the error propagates.
        """
        if self.net is not None:
            raise TestbedError(f"testbed {self.tag} is already up; call down() first")
        t0 = time.monotonic()
        self.preflight()
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._build()
            self._configure_hosts()
            if self.kernel_routes:
                self.gloo_ips = kernelroute.setup(self.plan, self.cfg, self.node_pid, _in, _run)
            self._setup_impairments()
            if self.verify:
                self._verify_impairments()
            self._start_switches()
            results = self._apply() if self.apply_config else []
            if self.link_mbps is not None and self.verify and self.apply_config:
                self.verify_shaping()
        except BaseException:
            self.down()
            raise
        self.report = {
            "tag": self.tag, "topology": str(self.topo_path) if self.topo_path else None,
            "target": self.choice.target, "target_reason": self.choice.reason,
            "netem": self.netem, "workdir": str(self.workdir),
            "switches": {s.name: {"grpc": s.grpc, "device_id": s.device_id,
                                  "pid": self.net[s.name].proc.pid,
                                  "ports": {str(p): i for p, i in s.ports}}
                         for s in self.plan.switches},
            "hosts": {h.name: {"ip": h.ip, "mac": h.mac, "switch": f"{h.switch}:{h.port}",
                               "pid": self.net[h.name].pid} for h in self.plan.hosts},
            "links": [self._link_report(ln) for ln in self.plan.links],
            "root_interfaces": list(self.plan.root_interfaces),
            "controller": results,
            "link_mbps": self.link_mbps,
            "shaper": ("tc tbf on both egresses of every host link" if self.link_mbps else None),
            "measured_mbps": self.measured_mbps,
            "gloo": ({"ifname": kernelroute.GLOO_IF, "ips": self.gloo_ips,
                      "routed_by": "kernel routers on the switches' ports"}
                     if self.kernel_routes else None),
            "notes": list(self.notes),
            "up_s": round(time.monotonic() - t0, 2),
        }
        return self.report

    def _link_report(self, ln: LinkPlan) -> dict[str, Any]:
        out: dict[str, Any] = {"link": ln.label, "a_if": ln.a_if, "b_if": ln.b_if}
        if ln.impairment is not None:
            out.update(impairment=ln.impairment.to_dict(), asked=ln.impairment.describe(),
                       node=ln.node, mode=self.modes.get(ln.label),
                       node_pid=self.net[ln.node].pid if self.net else None,
                       measured={d: r.to_dict() for d, r in self.measured.get(ln.label, {}).items()})
            if ln.label in self.forwarders:
                out["forwarder_pid"] = self.forwarders[ln.label].pid
                out["forwarder_stats"] = str(self.workdir / f"{ln.node}.stats.json")
        return out

    def _build(self) -> None:
        from mininet.link import Link
        from mininet.net import Mininet
        from mininet.node import Host

        sw_cls = switch_class()
        net = Mininet(topo=None, switch=sw_cls, host=Host, controller=None, link=Link,
                      build=False, autoSetMacs=False, autoStaticArp=False, inNamespace=False)
        self.net = net
        thrifts = (free_ports(len(self.plan.switches),
                              avoid={s.grpc_port for s in self.plan.switches})
                   if self.choice.target == "bmv2" else [None] * len(self.plan.switches))
        for s, thrift in zip(self.plan.switches, thrifts, strict=True):
            net.addSwitch(s.name, cls=sw_cls, dpid=f"{s.index + 1:x}",
                          command=switch_command(self.choice.target, s, self.python, thrift),
                          log_path=str(self.workdir / f"switch-{s.name}.log"))
        for h in self.plan.hosts:
            net.addHost(h.name, ip=None, mac=h.mac)
        for ln in self.plan.impaired:
            net.addHost(ln.node, ip=None)
        for h in self.plan.hosts:
            net.addLink(h.name, h.switch, port2=h.port, intfName1=h.ifname, intfName2=h.switch_if,
                        addr1=h.mac)
        for ln in self.plan.links:
            if ln.node is None:
                net.addLink(ln.a, ln.b, port1=ln.a_port, port2=ln.b_port, intfName1=ln.a_if,
                            intfName2=ln.b_if)
            else:
                net.addLink(ln.node, ln.a, port2=ln.a_port, intfName1=ln.node_ifs[0], intfName2=ln.a_if)
                net.addLink(ln.node, ln.b, port2=ln.b_port, intfName1=ln.node_ifs[1], intfName2=ln.b_if)
        net.build()
        if self.kernel_routes:  # after build: interfaces come later (no "no interfaces" note)
            for s in self.plan.switches:
                net.addHost(kernelroute.router_name(self.tag, s.index), ip=None)

    def _configure_hosts(self) -> None:
        for ifname in self.plan.root_interfaces:
            with contextlib.suppress(RuntimeError):
                _run(["sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1"])
            _offloads_off(_run, ifname)
            _run(["ip", "link", "set", ifname, "up"])
        for h in self.plan.hosts:
            run = _in(self.net[h.name].pid)
            with contextlib.suppress(RuntimeError):
                run(["sysctl", "-qw", f"net.ipv6.conf.{h.ifname}.disable_ipv6=1"])
            _offloads_off(run, h.ifname)
            run(["ip", "addr", "flush", "dev", h.ifname])
            run(["ip", "addr", "add", f"{h.ip}/32", "dev", h.ifname])
            run(["ip", "link", "set", h.ifname, "up"])
            run(["ip", "route", "add", f"{h.gateway_ip}/32", "dev", h.ifname, "scope", "link"])
            run(["ip", "route", "add", "default", "via", h.gateway_ip, "dev", h.ifname, "onlink"])
            run(["ip", "neigh", "replace", h.gateway_ip, "lladdr", h.gateway_mac, "dev", h.ifname,
                 "nud", "permanent"])
            # THC results are read by raw sockets (before netfilter); the host's IP stack must not
            # answer them with ICMP port unreachable, which the switch would count as NO_ROUTE.
            run(["nft", "-f", "-"], HOST_NFT)
            if self.link_mbps is not None:  # uplink: the host's egress; downlink: the switch's
                run(["tc", "qdisc", "replace", "dev", h.ifname, "root", *tbf_args(self.link_mbps)])
                _run(["tc", "qdisc", "replace", "dev", h.switch_if, "root",
                      *tbf_args(self.link_mbps)])

    def _setup_impairments(self) -> None:
        if not self.plan.impaired:
            return
        self.netem = impnode.kernel_has_netem()
        for ln in self.plan.impaired:
            assert ln.impairment is not None and ln.node is not None
            mode = self.force_mode or impnode.choose_mode(ln.impairment, self.netem)
            self.modes[ln.label] = mode
            node = self.net[ln.node]
            run = _in(node.pid)
            for dev in ln.node_ifs:
                _offloads_off(run, dev)
            try:
                impnode.configure(ln.impairment, *ln.node_ifs, mode, run)
            except ImpairmentError as exc:
                raise ImpairmentError(f"link {ln.label} ({ln.impairment.describe()}), mode {mode}: "
                                      f"{exc}") from exc
            if mode == "forwarder":
                stats = self.workdir / f"{ln.node}.stats.json"
                ready = self.workdir / f"{ln.node}.ready"
                ready.unlink(missing_ok=True)
                cmd = impnode.forwarder_command(ln.impairment, *ln.node_ifs, str(stats), str(ready),
                                                python=self.python)
                logp = self.workdir / f"{ln.node}.log"
                proc = spawn(cmd, logp, ns_pid=node.pid)
                self.forwarders[ln.label] = proc
                end = time.monotonic() + 30
                while not ready.exists():
                    if proc.poll() is not None or time.monotonic() > end:
                        raise ImpairmentError(f"link {ln.label}: impairment forwarder did not start: "
                                              f"{logp.read_text()[-1000:]}")
                    time.sleep(0.05)
            log.info("link %s: %s via %s", ln.label, ln.impairment.describe(), mode)

    def _verify_impairments(self) -> None:
        for ln in self.plan.impaired:
            assert ln.impairment is not None
            label = f"{ln.label} (mode {self.modes[ln.label]})"
            for attempt in (1, 2):
                socks = [open_probe_socket(ln.a_if), open_probe_socket(ln.b_if)]
                try:
                    res = {"a->b": measure(ln.impairment, socks[0], socks[1]),
                           "b->a": measure(ln.impairment, socks[1], socks[0])}
                finally:
                    for s in socks:
                        s.close()
                self.measured[ln.label] = res
                try:
                    check(ln.impairment, res, link=label)
                    break
                except ImpairmentError as exc:
                    # One more measurement: a CPU hiccup can stall a user-space forwarder for a
                    # moment; an impairment that is really missing fails both.
                    if attempt == 2:
                        raise
                    log.warning("%s; measuring again", exc)
            log.info("link %s verified: %s", ln.label, {d: r.to_dict() for d, r in res.items()})

    def shaped_ends(self) -> list[ShapedEnd]:
        """Every shaped egress: each host's ``eth0`` (up) and its switch port (down)."""
        return [e for h in self.plan.hosts
                for e in (ShapedEnd(h.name, "up", self.net[h.name].pid, h.ifname),
                          ShapedEnd(h.name, "down", None, h.switch_if))]

    def shaping_flows(self) -> list[Flow]:
        """TCP transfers that measure the shaped host links (:meth:`verify_shaping`).

        With kernel routes, one per link and direction, as on the namespace rack: host ↔ its
        router's address on the link, so that each transfer crosses exactly one shaper.
        Otherwise :meth:`ring_flows`.
        """
        if not self.kernel_routes:
            return self.ring_flows()
        flows = []
        for k, h in enumerate(self.plan.hosts):
            sw = self.plan.switch(h.switch)
            router = self.net[kernelroute.router_name(self.tag, sw.index)].pid
            host = self.net[h.name].pid
            flows.append(Flow(((h.name, "up"),), host, router, kernelroute.router_ip(k)))
            flows.append(Flow(((h.name, "down"),), router, host, kernelroute.gloo_ip(k)))
        return flows

    def ring_flows(self) -> list[Flow]:
        """TCP transfers that cross every host link once in each direction, routed by the
        switches (by their kernel routers, between gloo addresses, when there are): a ring over
        the hosts of each switch (a lone host joins the next switch's ring), so that no
        transfer crosses a switch-to-switch link where it can be helped."""
        groups: dict[str, list] = {}
        for h in self.plan.hosts:
            groups.setdefault(h.switch, []).append(h)
        rings: list[list] = []
        for hosts in groups.values():
            if rings and len(rings[-1]) < 2:
                rings[-1].extend(hosts)
            else:
                rings.append(list(hosts))
        if len(rings) > 1 and len(rings[-1]) < 2:
            rings[-2].extend(rings.pop())
        flows = []
        for ring in rings:
            for src, dst in zip(ring, ring[1:] + ring[:1], strict=True):
                if src is dst:
                    continue
                flows.append(Flow(((src.name, "up"), (dst.name, "down")), self.net[src.name].pid,
                                  self.net[dst.name].pid, self.gloo_ips.get(dst.name, dst.ip)))
        return flows

    @property
    def gloo_ifname(self) -> str:
        """The hosts' interface for ordinary TCP (gloo): ``g0`` with kernel routes, else
        ``eth0``."""
        return kernelroute.GLOO_IF if self.kernel_routes else self.plan.hosts[0].ifname

    def verify_shaping(self, seconds: float = 0.6) -> dict[str, dict[str, float]]:
        """Check every host link's shapers and measure the links with TCP routed by the
        switches (:func:`control_plane.testbed.shaping.verify_flows`, the namespace rack's
        check); raises :class:`~control_plane.testbed.shaping.ShapingError`."""
        if self.link_mbps is None:
            raise TestbedError("verify_shaping: the testbed's host links are not shaped")
        self.measured_mbps = verify_flows(self.shaping_flows(), self.link_mbps, seconds,
                                          self.shaped_ends())
        log.info("host links shaped to %g Mbit/s, measured %s", self.link_mbps, self.measured_mbps)
        return self.measured_mbps

    def qdisc_stats(self) -> dict[str, dict]:
        """Bytes, packets and drops of every host link's shaper, by host and direction."""
        return qdisc_stats(self.shaped_ends())

    def _start_switches(self) -> None:
        self.net.start()
        for s in self.plan.switches:
            node = self.net[s.name]
            what = f"switch {s.name} ({self.choice.target})"
            try:
                _wait_port(s.grpc_port, node.proc, 60.0, what, node.log_path)
            except TestbedError as exc:
                if node.proc is None or node.proc.poll() is None:
                    raise
                # The switch process died while starting (seen: gRPC aborting in its event
                # engine, "epoll_wait error: Bad file descriptor", in BMv2 and the software
                # target alike, rarely, under load). It holds no state yet: start it once more,
                # and say so.
                log.warning("%s; starting it again", str(exc).splitlines()[0])
                kept = node.log_path.with_suffix(".crash.log")
                node.log_path.replace(kept)
                node.start([])
                _wait_port(s.grpc_port, node.proc, 60.0, what, node.log_path)

    def _apply(self) -> list[dict[str, Any]]:
        from control_plane.controller import Controller, run_sync

        logging.getLogger("finsy").setLevel(logging.ERROR)
        ctl = Controller(self.cfg_eff, timeout=30.0, tokens=self.tokens)
        results = run_sync(ctl.apply())
        self.tokens = dict(ctl.tokens)
        errors = [r.error for r in results if not r.ok]
        if errors:
            raise TestbedError("controller apply failed: " + "; ".join(str(e) for e in errors))
        return [{"switch": r.switch, "writes": r.writes, "in_sync": r.in_sync_after} for r in results]

    def down(self) -> dict[str, Any]:
        """Stop everything :meth:`up` started and remove its root-namespace interfaces.

        Returns what was removed (and anything that could not be); safe to call twice.
        """
        removed: dict[str, Any] = {"processes": [], "nodes": [], "interfaces": [], "left": []}
        for ep in self._endpoints:
            with contextlib.suppress(OSError):
                ep.close()
        self._endpoints.clear()
        for label, proc in list(self.forwarders.items()):
            stop_process(proc)
            removed["processes"].append(proc.pid)
            self.forwarders.pop(label)
        net, self.net = self.net, None
        if net is not None:
            for sw in net.switches:
                if getattr(sw, "proc", None) is not None:
                    removed["processes"].append(sw.proc.pid)
            removed["nodes"] = [n.name for n in (*net.hosts, *net.switches)]
            try:
                net.stop()
            except Exception as exc:  # keep going: the interfaces below still go
                log.warning("Mininet stop: %s", exc)
        for ifname in self.plan.root_interfaces:
            if Path(f"/sys/class/net/{ifname}").exists():
                try:
                    _run(["ip", "link", "del", ifname])
                    removed["interfaces"].append(ifname)
                except RuntimeError:
                    removed["left"].append(ifname)
        return removed

    # -- nodes and switches ------------------------------------------------------------------
    def node_pid(self, name: str) -> int:
        """PID whose namespaces are node ``name``'s (hosts, impairment nodes)."""
        if self.net is None:
            raise TestbedError("testbed is not up")
        return self.net[name].pid

    def cmd(self, host: str, argv: list[str], stdin: str | None = None) -> str:
        """Run ``argv`` inside ``host`` and return its output (RuntimeError on failure)."""
        return _in(self.node_pid(host))(argv, stdin)

    def ping(self, src: str, dst: str, count: int = 1, timeout: float = 2.0) -> bool:
        """True when ``src`` gets ``count`` echo replies from ``dst`` (routed by the switches).

        Raises :class:`~host.tools.MissingToolError` (naming iputils-ping) when ``ping`` is missing:
        no reply and no ping are not the same answer.
        """
        ip = self.cfg.host(dst).ip
        try:
            out = self.cmd(src, ["ping", "-n", "-c", str(count), "-W", f"{timeout:g}", ip])
        except MissingToolError:
            raise
        except RuntimeError:
            return False
        return f"{count} received" in out

    def counters(self) -> dict[str, dict[str, dict[int, int]]]:
        """Per switch, the program's counters read over P4Runtime (drops, contributions, ...)."""
        from control_plane.controller import Controller, run_sync

        res = run_sync(Controller(self.cfg_eff, timeout=15.0).status())
        bad = [r.error for r in res if not r.ok]
        if bad:
            raise TestbedError("; ".join(str(b) for b in bad))
        return {r.switch: r.counters for r in res}

    def status(self) -> dict[str, Any]:
        """Liveness of every switch process, node and forwarder, plus forwarder counters."""
        net = self.net
        out: dict[str, Any] = {"up": net is not None, "tag": self.tag, "target": self.choice.target}
        if net is None:
            return out
        out["switches"] = {s.name: {"alive": net[s.name].proc is not None and net[s.name].proc.poll() is None,
                                    "grpc_open": not _port_free(s.grpc_port)} for s in self.plan.switches}
        out["hosts"] = {h.name: {"alive": net[h.name].shell is not None and net[h.name].shell.poll() is None}
                        for h in self.plan.hosts}
        links = []
        for ln in self.plan.impaired:
            d: dict[str, Any] = {"link": ln.label, "mode": self.modes.get(ln.label)}
            proc = self.forwarders.get(ln.label)
            if proc is not None:
                d["forwarder_alive"] = proc.poll() is None
                stats = self.workdir / f"{ln.node}.stats.json"
                if stats.exists():
                    with contextlib.suppress(ValueError):
                        d["forwarder"] = json.loads(stats.read_text())
            links.append(d)
        out["links"] = links
        return out
