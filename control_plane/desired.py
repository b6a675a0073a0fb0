"""Desired state: every entity each switch should hold, derived from the config.

:func:`desired_state` is pure: it places the jobs (:mod:`control_plane.placement`) and asks
the module mirroring each P4 control for its entities (``thc_validate``, ``thc_load``,
``thc_members``, ``multicast``, ``routing``).
"""

from __future__ import annotations

from pathlib import Path

import finsy as fy
from finsy.proto import p4i

from control_plane import multicast, routing, thc_load, thc_members, thc_validate
from control_plane.config import DEFAULT_P4INFO, TOFINO_P4INFO, VALUES_TARGETS, NetworkConfig
from control_plane.placement import Placement, limits_from_p4info, place


def desired_state(cfg: NetworkConfig, p4info: p4i.P4Info | None = None,
                  placement: Placement | None = None) -> dict[str, list]:
    """switch name → the finsy entities it should hold (table entries and multicast groups).

    ``p4info`` supplies the capacities (jobs table size, slot pool); without it the
    defaults of p4/v1model/include/size.p4 apply.

    Raises
    ------
    control_plane.config.ConfigError
        If the jobs do not fit the switch program (slots, jobs, table sizes).
    """
    placement = placement or place(cfg, limits_from_p4info(p4info))
    routes = routing.entries(cfg)
    out: dict[str, list] = {}
    for sw in cfg.switches:
        ents: list = []
        for j in placement.per_switch[sw.name]:
            ents += thc_validate.entries(j)
            if sw.target not in VALUES_TARGETS:
                ents += thc_load.entries(j)   # the TNA program has no table: workers map
            ents += thc_members.entries(j)
            ents += multicast.entries(j)
        ents += routes[sw.name]
        out[sw.name] = ents
    return out


def parse_p4info_text(text: str) -> p4i.P4Info:
    """A P4Info from its text format, without top-level ``externs`` blocks.

    The Tofino compiler lists its architecture externs there as ``Any`` messages of types
    (``barefoot.Register``, ...) that no installed descriptor knows; the controller does not
    use them (tables, actions, counters and registers are top-level entities).
    """
    from google.protobuf import text_format

    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        if not skipping and line.startswith("externs {"):
            skipping = True
            continue
        if skipping:
            if line.startswith("}"):
                skipping = False
            continue
        kept.append(line)
    info = p4i.P4Info()
    text_format.Parse("\n".join(kept), info)
    return info


def load_p4info(cfg: NetworkConfig) -> tuple[p4i.P4Info, str]:
    """The program's P4Info and where it came from.

    Order: ``controller.p4info`` from the config, then the committed compiler output
    ``p4/build/netco.p4info.txtpb`` (``p4/build/tofino/netco.p4info.txtpb`` when the switches
    are Tofino switches), then the software target's equivalent P4Info
    (:func:`host.softswitch.p4info.fallback_p4info`, for machines without p4c).

    Raises
    ------
    FileNotFoundError
        If ``controller.p4info`` is set but missing, or no P4Info is available at all.
    """

    path = cfg.controller.p4info
    if path is not None and not Path(path).exists():
        raise FileNotFoundError(f"controller.p4info: {path} does not exist")
    tofino = bool(cfg.switches) and all(s.target in VALUES_TARGETS for s in cfg.switches)
    for cand in (path, TOFINO_P4INFO if tofino else DEFAULT_P4INFO):
        if cand is not None and Path(cand).exists():
            return parse_p4info_text(Path(cand).read_text()), str(cand)
    try:
        from host.softswitch.p4info import fallback_p4info
    except ImportError as exc:
        raise FileNotFoundError(f"{DEFAULT_P4INFO} missing (build it: netco p4 build) and no "
                                "fallback P4Info available") from exc
    return fallback_p4info(), "fallback P4Info of the software target (no p4c output)"


def schema(info: p4i.P4Info) -> fy.P4Schema:
    """A finsy schema for encoding and normalising entities."""
    return fy.P4Schema(info)
