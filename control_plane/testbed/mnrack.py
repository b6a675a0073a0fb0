"""Mininet testbeds with shaped links, as the jobs of :mod:`control_plane.testbed.rackrun` use them.

:class:`MininetRack` brings up a :class:`~control_plane.testbed.net.Testbed` of one of the
repository's topology files — the rack (``mininet/rack.yaml``: four hosts under one switch)
or two buildings (``mininet/two_buildings.yaml``: a leaf per building, the WAN link between
building B's leaf and building A's edge switch) — with every host link shaped to
``link_mbps`` (``tc tbf`` on both egresses, verified before use: the check the namespace rack
uses, :mod:`control_plane.testbed.shaping`) and the topology's switch-to-switch links with an
impairment (the WAN) replaced by ``wan_mbps`` (and ``wan_delay_ms``) through the impairment
node, measured before use too. It offers what the rack jobs need from any testbed, as
:class:`~control_plane.testbed.nsrack.NamespaceRack` does: the hosts' namespaces and
interface (worker processes enter them: THC's raw frames and the baselines' gloo TCP both
leave through the hosts' shaped ``eth0``; gloo is routed by the switch program), the THC job's
network spec, a report and the shapers' counters.

Needs root and Mininet (the namespace rack does not).
"""

from __future__ import annotations

import os
from pathlib import Path

from control_plane.testbed.rack import Rack
from host.paths import REPO

#: The topologies a rack job can run on: name -> topology file.
TOPOLOGIES = {"mininet": REPO / "mininet" / "rack.yaml",
              "buildings": REPO / "mininet" / "two_buildings.yaml"}
KIND = {"mininet": "Mininet rack", "buildings": "Mininet two buildings"}


class MininetRack(Rack):
    """A shaped Mininet testbed of ``TOPOLOGIES[testbed]`` (or the file ``topo``).

    Parameters
    ----------
    testbed : {"mininet", "buildings"}
        Which topology (the rack or two buildings).
    link_mbps : float or None
        Rate of every host link, both directions; None leaves them unshaped.
    target : {"softswitch", "bmv2", "auto"}
        The switch program.
    wan_mbps, wan_delay_ms : float, optional
        The impaired switch-to-switch links (the WAN of two buildings): their rate (default
        ``link_mbps``) and one-way delay (default 0), instead of what the file asks.
    verify : bool
        Verify the shaping (and the WAN's impairment) before use.
    """

    def __init__(self, testbed: str = "mininet", link_mbps: float | None = 100.0, *,
                 target: str = "softswitch", wan_mbps: float | None = None,
                 wan_delay_ms: float = 0.0, verify: bool = True, tag: str | None = None,
                 workdir: str | Path | None = None, topo: str | Path | None = None) -> None:
        from control_plane.config import load_config
        from control_plane.testbed.impair.params import Impairment
        from control_plane.testbed.net import Testbed, with_free_ports
        from control_plane.testbed.plan import make_plan

        if testbed not in TOPOLOGIES:
            raise ValueError(f"testbed {testbed!r}: use one of {', '.join(TOPOLOGIES)}")
        self.testbed = testbed
        self.topo = Path(topo) if topo else TOPOLOGIES[testbed]
        cfg = with_free_ports(load_config(self.topo))
        tag = tag or f"mr{os.getpid() % 1000:03d}"
        wan_rate = wan_mbps if wan_mbps is not None else link_mbps
        self.wan: dict[str, dict] = {}
        overrides = {}
        if wan_rate is not None or wan_delay_ms:
            for ln in make_plan(cfg, tag).impaired:
                imp = Impairment(delay_ms=wan_delay_ms, bandwidth_mbps=wan_rate)
                overrides[ln.label] = imp
                self.wan[ln.label] = imp.to_dict()
        self.link_mbps = link_mbps
        self.tb = Testbed(cfg, target=target, tag=tag, workdir=workdir, verify=verify,
                          impairments=overrides or None, link_mbps=link_mbps)

    # -- lifecycle ------------------------------------------------------------------------
    def up(self) -> dict:
        """Build, shape, start the switches, verify; return :meth:`report`."""
        self.tb.up()
        return self.report()

    def down(self) -> dict:
        """Tear down exactly what :meth:`up` built (``Testbed.down``)."""
        return self.tb.down()

    # -- what workers need ------------------------------------------------------------------
    @property
    def members(self) -> list[str]:
        return list(self.tb.job().members)

    @property
    def workers(self) -> int:
        return len(self.members)

    @property
    def netns_paths(self) -> tuple[str, ...]:
        """Per rank, the namespace of its host (worker processes enter it)."""
        return tuple(f"/proc/{self.tb.node_pid(h)}/ns/net" for h in self.members)

    @property
    def ifname(self) -> str:
        """The hosts' interface gloo binds (the kernel-routed ``g0``)."""
        return self.tb.gloo_ifname

    def network_spec(self, round_base: int | None = None):
        """The THC job as every worker reaches it: raw frames on its host's interface."""
        return self.tb.raw_network_spec(round_base=round_base)

    def qdisc_stats(self) -> dict[str, dict]:
        return self.tb.qdisc_stats()

    def switch_status(self) -> dict:
        """Per switch, its counters read over P4Runtime."""
        return {sw: {name: {str(k): v for k, v in vals.items()} for name, vals in ctr.items()}
                for sw, ctr in self.tb.counters().items()}

    def report(self) -> dict:
        rep = self.tb.report
        out = {"kind": KIND.get(self.testbed, "Mininet"), "topology": str(self.topo),
               "rootless": False, "workers": self.workers, "link_mbps": self.link_mbps,
               "shaper": rep.get("shaper"), "target": rep.get("target"),
               "target_reason": rep.get("target_reason"),
               "hosts": [{"name": h, "ip": rep["hosts"][h]["ip"],
                          "switch_port": rep["hosts"][h]["switch"]} for h in self.members],
               "measured_mbps": self.tb.measured_mbps,
               "routing": ("THC: raw frames through the switch program; gloo: "
                           + ("kernel routers on the switches' ports (kernelroute.py)"
                              if self.tb.kernel_routes else "routed by the switch program")),
               "gloo": rep.get("gloo")}
        wan = [ln for ln in rep.get("links", []) if "asked" in ln]
        if wan:
            out["wan"] = [{"link": ln["link"], "asked": ln["asked"], "mode": ln["mode"],
                           "measured": ln.get("measured")} for ln in wan]
        return out

