"""Entries of the P4 control ``Routing`` (p4/v1model/include/control/routing.p4).

``ingress.routing.routes``: ``dst_addr (LPM) → route(port, src_mac, dst_mac)``. Every switch
gets a /32 route to every host: out of the host's port when it attaches there, else towards
the next switch on the path. Paths are hop-count shortest paths over ``links`` (ties broken
by the order of ``switches`` in the file), except where an explicit path in ``paths`` covers
the destination: switches on that path forward along it. ``src_mac`` is the switch's MAC,
``dst_mac`` the host's or the next switch's.
"""

from __future__ import annotations

import finsy as fy

from control_plane.config import NetworkConfig
from control_plane.config.topology import shortest_paths
from control_plane.placement import ROUTES_TABLE
from control_plane.reconcile import OWNER_TAG

ROUTE = "ingress.routing.route"


def next_hops(cfg: NetworkConfig) -> dict[str, dict[str, str | None]]:
    """switch → host → next switch towards the host (None: the host attaches here).

    Hosts unreachable from a switch are left out for that switch.
    """
    out: dict[str, dict[str, str | None]] = {}
    explicit: dict[tuple[str, str], str] = {}
    for p in cfg.paths:
        for a, b in zip(p.via, p.via[1:], strict=False):
            explicit[(a, p.dst)] = b
    for sw in cfg.switches:
        sp = shortest_paths(cfg, sw.name)
        hops: dict[str, str | None] = {}
        for h in cfg.hosts:
            if h.switch == sw.name:
                hops[h.name] = None
            elif (sw.name, h.name) in explicit:
                hops[h.name] = explicit[(sw.name, h.name)]
            elif h.switch in sp:
                hops[h.name] = sp[h.switch][1]
        out[sw.name] = hops
    return out


def path(cfg: NetworkConfig, src_switch: str, host: str) -> list[str]:
    """Switches a packet to ``host`` crosses from ``src_switch`` under the installed routes."""
    hops = next_hops(cfg)
    out = [src_switch]
    while (nxt := hops[out[-1]].get(host, "")) is not None:
        if nxt == "" or nxt in out:
            raise ValueError(f"no loop-free route from {src_switch} to {host}")
        out.append(nxt)
    return out


def entries(cfg: NetworkConfig) -> dict[str, list[fy.P4TableEntry]]:
    """switch → its ``routes`` entries."""
    hosts = {h.name: h for h in cfg.hosts}
    out: dict[str, list[fy.P4TableEntry]] = {}
    for sw_name, hops in next_hops(cfg).items():
        sw = cfg.switch(sw_name)
        nbr = cfg.neighbours(sw_name)
        ents = []
        for h_name, nxt in hops.items():
            h = hosts[h_name]
            if nxt is None:
                port, dst_mac = h.port, h.mac
            else:
                port, dst_mac = nbr[nxt], cfg.switch(nxt).mac
            ents.append(fy.P4TableEntry(
                ROUTES_TABLE,
                match=fy.P4TableMatch(dst_addr=f"{h.ip}/32"),
                action=fy.P4TableAction(ROUTE, port=port, src_mac=sw.mac, dst_mac=dst_mac),
                metadata=OWNER_TAG,
            ))
        out[sw_name] = ents
    return out
