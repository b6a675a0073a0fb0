"""What a testbed will create for a controller topology file (pure: no root, no Mininet).

The controller's desired-state file (:mod:`control_plane.config`, docs/controller.md) already
names every switch (P4Runtime address, device id, MAC, own IPv4 address), host (MAC, IPv4,
attachment ``switch:port``) and switch-to-switch link (ports, optional
``bandwidth_mbps``/``delay_ms``/``loss_pct``). :func:`make_plan` turns it into the testbed's
layout:

* one Mininet switch node per switch, in the root namespace (its P4Runtime server listens on
  the file's ``address``, which must therefore be local), with one veth end per used port,
  named ``<tag>-<switch>-<port>`` (or ``<tag>s<i>-<port>`` when that exceeds 15 characters,
  Linux's limit); the tag keeps two testbeds on one machine apart;
* one Mininet host per host, interface ``eth0`` (inside its namespace), address ``IP/32``, the
  attachment switch's ``addr`` as gateway with a static ARP entry for the switch's MAC;
* for every link with an impairment, an impairment node (:mod:`control_plane.testbed.impair`) in the middle:
  ``switch a — eth0 [node] eth1 — switch b``; other links are plain veth pairs.

Only the names that live in the root namespace (switch ports) can collide with anything else
on the machine; they are all listed in :attr:`TestbedPlan.root_interfaces`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from control_plane.config import NetworkConfig
from control_plane.testbed.impair.params import Impairment

IFNAMSIZ = 15  # usable characters of a Linux interface name
LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "[::1]", "::1")


class PlanError(ValueError):
    """The topology cannot be built as a testbed; the message names the field and the fix."""


@dataclass(frozen=True)
class SwitchPlan:
    name: str
    index: int
    device_id: int
    grpc: str               # HOST:PORT of its P4Runtime server (from the file)
    grpc_port: int
    mac: str
    addr: str
    ports: tuple[tuple[int, str], ...]  # (port number, root-namespace interface)

    def port_if(self, port: int) -> str:
        return dict(self.ports)[port]


@dataclass(frozen=True)
class HostPlan:
    name: str
    ifname: str             # inside the host's namespace
    mac: str
    ip: str
    switch: str
    port: int
    switch_if: str          # the switch's end (root namespace)
    gateway_ip: str         # attachment switch's addr
    gateway_mac: str


@dataclass(frozen=True)
class LinkPlan:
    a: str
    a_port: int
    a_if: str
    b: str
    b_port: int
    b_if: str
    impairment: Impairment | None = None
    node: str | None = None             # impairment node's Mininet name
    node_ifs: tuple[str, str] = ("eth0", "eth1")

    @property
    def label(self) -> str:
        return f"{self.a}:{self.a_port}-{self.b}:{self.b_port}"


@dataclass(frozen=True)
class TestbedPlan:
    tag: str
    switches: tuple[SwitchPlan, ...]
    hosts: tuple[HostPlan, ...]
    links: tuple[LinkPlan, ...]

    @property
    def root_interfaces(self) -> tuple[str, ...]:
        """Every interface the testbed creates in the root namespace."""
        return tuple(i for s in self.switches for _, i in s.ports)

    @property
    def impaired(self) -> tuple[LinkPlan, ...]:
        return tuple(ln for ln in self.links if ln.impairment is not None)

    def switch(self, name: str) -> SwitchPlan:
        return next(s for s in self.switches if s.name == name)

    def host(self, name: str) -> HostPlan:
        return next(h for h in self.hosts if h.name == name)


def link_impairment(bandwidth_mbps: float | None, delay_ms: float | None, loss_pct: float | None,
                    seed: int) -> Impairment | None:
    """The impairment of a config link (None when it asks for nothing)."""
    imp = Impairment(delay_ms=delay_ms or 0.0, loss_pct=loss_pct or 0.0,
                     bandwidth_mbps=bandwidth_mbps, seed=seed)
    return imp if imp.active else None


def _ifname(tag: str, sw: str, index: int, port: int) -> str:
    name = f"{tag}-{sw}-{port}"
    if len(name) <= IFNAMSIZ and re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        return name
    return f"{tag}s{index}-{port}"


def check_tag(tag: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9]{1,5}", tag):
        raise PlanError(f"tag {tag!r}: use 2..6 lowercase letters/digits starting with a letter")


def make_plan(cfg: NetworkConfig, tag: str, seed: int = 0,
              impairments: dict[str, Impairment] | None = None) -> TestbedPlan:
    """Lay out ``cfg`` as a testbed whose root-namespace names start with ``tag``.

    ``impairments`` overrides or adds impairments per link, keyed by ``"a:port-b:port"`` as
    in :attr:`LinkPlan.label` (e.g. jitter, duplication or reordering, which the file has no
    fields for).

    Raises
    ------
    PlanError
        A switch address that is not on this machine, or an override for an unknown link.
    """
    check_tag(tag)
    problems = []
    ports: dict[str, dict[int, str]] = {s.name: {} for s in cfg.switches}
    index = {s.name: i for i, s in enumerate(cfg.switches)}
    for h in cfg.hosts:
        ports[h.switch][h.port] = _ifname(tag, h.switch, index[h.switch], h.port)
    for ln in cfg.links:
        ports[ln.a][ln.a_port] = _ifname(tag, ln.a, index[ln.a], ln.a_port)
        ports[ln.b][ln.b_port] = _ifname(tag, ln.b, index[ln.b], ln.b_port)
    switches = []
    for i, s in enumerate(cfg.switches):
        host, _, port_s = s.address.rpartition(":")
        if host not in LOCAL_HOSTS:
            problems.append(f"switches[{i}].address: {s.address} is not on this machine; a testbed "
                            "runs its switches here, so use 127.0.0.1:PORT")
            continue
        switches.append(SwitchPlan(s.name, i, s.device_id, f"127.0.0.1:{port_s}", int(port_s),
                                   s.mac, s.addr, tuple(sorted(ports[s.name].items()))))
    grpc_ports = [s.grpc_port for s in switches]
    if len(set(grpc_ports)) != len(grpc_ports):
        problems.append("switches[].address: two switches share a port on 127.0.0.1; give each its own")
    hosts = []
    for h in cfg.hosts:
        sw = cfg.switch(h.switch)
        hosts.append(HostPlan(h.name, "eth0", h.mac, h.ip, h.switch, h.port, ports[h.switch][h.port],
                              sw.addr, sw.mac))
        if ipaddress.IPv4Address(h.ip).is_loopback:
            problems.append(f"hosts[{h.name}].ip: {h.ip} is a loopback address; use e.g. 10.0.0.x")
    overrides = dict(impairments or {})
    links = []
    n_imp = 0
    for k, ln in enumerate(cfg.links):
        label = f"{ln.a}:{ln.a_port}-{ln.b}:{ln.b_port}"
        imp = overrides.pop(label, None) or link_impairment(ln.bandwidth_mbps, ln.delay_ms,
                                                            ln.loss_pct, seed * 1000 + k)
        node = None
        if imp is not None:
            node = f"{tag}i{n_imp}"
            n_imp += 1
        links.append(LinkPlan(ln.a, ln.a_port, ports[ln.a][ln.a_port], ln.b, ln.b_port,
                              ports[ln.b][ln.b_port], imp, node))
    if overrides:
        known = ", ".join(ln.label for ln in links) or "(no links)"
        problems.append(f"impairments: no link {', '.join(sorted(overrides))}; links are {known}")
    if problems:
        raise PlanError("; ".join(problems))
    return TestbedPlan(tag, tuple(switches), tuple(hosts), tuple(links))
