"""Kernel routers beside a Mininet testbed's switches, for the baselines' TCP (gloo).

The switch program routes ordinary IPv4 too, but the software target forwards TCP at about
100 Mbit/s in all on this 2-core machine (measured: four concurrent flows through one switch
at 22-27 Mbit/s each, one flow alone at 88 Mbit/s), so gloo through it would measure the
software switch, not the shaped links. As on the namespace rack, where the switch
namespace's kernel routes what is not THC, every switch here gets a kernel router
(:data:`ROUTER` ``<tag>k<i>``: a Mininet node, its own namespace) attached to **the same
ports**: one ``macvlan`` per switch port, on the port's root-namespace interface, moved into
the router's namespace. Every host gets a ``macvlan`` ``g0`` on its ``eth0`` with its gloo
address (:func:`gloo_ip`), and gloo binds ``g0``.

Frames between ``g0`` and the routers cross the hosts' veths, hence both shapers of every host
link (a macvlan transmits through its lower device's qdisc), and the switch-to-switch links
(through their impairment nodes) along the same paths the switch program uses
(:func:`control_plane.routing.next_hops`). The switch program sees them too (its raw socket
taps the port) and drops them: it has no route for the gloo subnet. Nothing is added to the
root namespace: the macvlans live in the routers' and hosts' namespaces and go with them.
"""

from __future__ import annotations

from collections.abc import Callable

from control_plane.config import NetworkConfig
from control_plane.routing import next_hops
from control_plane.testbed.plan import TestbedPlan

#: The hosts' gloo subnet (only inside the testbed's namespaces).
GLOO_NET = "172.31"
#: The address every host and router uses as next hop on a link (resolved per device by a
#: permanent neighbour entry).
NEXT_HOP = f"{GLOO_NET}.0.1"
#: The gloo interface in every host.
GLOO_IF = "g0"

Runner = Callable[[list[str]], str]


def router_name(tag: str, index: int) -> str:
    """Mininet node name of switch ``index``'s kernel router."""
    return f"{tag}k{index}"


def gloo_ip(index: int) -> str:
    """Gloo address of the ``index``-th host of the plan."""
    return f"{GLOO_NET}.{index + 1}.2"


def router_ip(index: int) -> str:
    """Address of the router's port facing the ``index``-th host of the plan (the far end of
    that host's link, as the switch namespace's address on a namespace rack's link)."""
    return f"{GLOO_NET}.{index + 1}.1"


def gloo_mac(index: int) -> str:
    return f"02:67:6c:00:{index // 256:02x}:{index % 256:02x}"


def port_mac(switch_index: int, port: int) -> str:
    """MAC of switch ``switch_index``'s router on ``port``."""
    return f"02:72:74:{switch_index:02x}:{port // 256:02x}:{port % 256:02x}"


def _ns_setup(run: Runner) -> None:
    for key in ("net.ipv6.conf.default.disable_ipv6=1", "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"):
        run(["sysctl", "-qw", key])


def setup(plan: TestbedPlan, cfg: NetworkConfig, node_pid: Callable[[str], int],
          run_in: Callable[[int], Runner], run_root: Runner) -> dict[str, str]:
    """Build the routers and the hosts' gloo interfaces; return host → gloo address."""
    sw_index = {s.name: s.index for s in plan.switches}
    hops = next_hops(cfg)
    for s in plan.switches:
        pid = node_pid(router_name(plan.tag, s.index))
        run = run_in(pid)
        _ns_setup(run)
        run(["ip", "link", "set", "lo", "up"])  # the local table: next hops check against it
        run(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        for port, ifname in s.ports:
            dev = f"p{port}"
            run_root(["ip", "link", "add", "link", ifname, "name", dev, "address",
                      port_mac(s.index, port), "netns", str(pid), "type", "macvlan", "mode",
                      "bridge"])
            run(["sysctl", "-qw", f"net.ipv4.conf.{dev}.rp_filter=0"])
            run(["ip", "link", "set", dev, "up"])
        nbr = cfg.neighbours(s.name)
        for k, h in enumerate(plan.hosts):
            nxt = hops[s.name].get(h.name, "")
            if nxt == "":
                continue
            if nxt is None:  # attached here
                dev = f"p{h.port}"
                run(["ip", "addr", "add", f"{router_ip(k)}/32", "dev", dev])
                run(["ip", "route", "replace", f"{gloo_ip(k)}/32", "dev", dev])
                run(["ip", "neigh", "replace", gloo_ip(k), "lladdr", gloo_mac(k), "dev", dev,
                     "nud", "permanent"])
            else:
                dev = f"p{nbr[nxt]}"
                far = cfg.neighbours(nxt)[s.name]
                run(["ip", "route", "replace", f"{gloo_ip(k)}/32", "via", NEXT_HOP, "dev", dev,
                     "onlink"])
                run(["ip", "neigh", "replace", NEXT_HOP, "lladdr", port_mac(sw_index[nxt], far),
                     "dev", dev, "nud", "permanent"])
    out = {}
    for k, h in enumerate(plan.hosts):
        run = run_in(node_pid(h.name))
        _ns_setup(run)
        run(["ip", "link", "add", "link", h.ifname, "name", GLOO_IF, "address", gloo_mac(k),
             "type", "macvlan", "mode", "bridge"])
        run(["ip", "addr", "add", f"{gloo_ip(k)}/32", "dev", GLOO_IF])
        run(["ip", "link", "set", GLOO_IF, "up"])
        run(["ip", "route", "add", f"{GLOO_NET}.0.0/16", "via", NEXT_HOP, "dev", GLOO_IF, "onlink"])
        run(["ip", "neigh", "replace", NEXT_HOP, "lladdr", port_mac(sw_index[h.switch], h.port),
             "dev", GLOO_IF, "nud", "permanent"])
        out[h.name] = gloo_ip(k)
    return out
