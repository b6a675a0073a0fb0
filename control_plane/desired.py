"""Desired state: every entity each switch should hold, derived from the config.

:func:`desired_state` is pure: it places the jobs (:mod:`control_plane.placement`) and asks
the module mirroring each P4 control for its entities (``thc_validate``, ``thc_load``,
``thc_members``, ``multicast``, ``routing``).
"""

from __future__ import annotations

import re
from pathlib import Path

import finsy as fy
from finsy.proto import p4i

from control_plane import multicast, routing, thc_load, thc_members, thc_validate
from control_plane.config import DEFAULT_P4INFO, TOFINO_P4INFO, VALUES_TARGETS, NetworkConfig
from control_plane.placement import Placement, limits_from_p4info, place


def desired_state(cfg: NetworkConfig, p4info: p4i.P4Info | None = None,
                  placement: Placement | None = None,
                  tokens: dict[int, int] | None = None) -> dict[str, list]:
    """switch name → the finsy entities it should hold (table entries and multicast groups).

    ``p4info`` supplies the capacities (jobs table size, slot pool); without it the
    defaults of p4/v1model/include/size.p4 apply. ``tokens`` maps a job id to its token
    (``set_job.token``; 0 for a job not in it).

    Raises
    ------
    control_plane.config.ConfigError
        If the jobs do not fit the switch program (slots, jobs, table sizes).
    """
    placement = placement or place(cfg, limits_from_p4info(p4info))   # program names
    routes = routing.entries(cfg)
    out: dict[str, list] = {}
    for sw in cfg.switches:
        ents: list = []
        for j in placement.per_switch[sw.name]:
            ents += thc_validate.entries(j, (tokens or {}).get(j.job.id, 0))
            if sw.target not in VALUES_TARGETS:
                ents += thc_load.entries(j)   # the TNA program has no table: workers map
            ents += thc_members.entries(j)
            ents += multicast.entries(j)
        ents += routes[sw.name]
        out[sw.name] = ents
    return out


def parse_p4info_text(text: str) -> p4i.P4Info:
    """A P4Info from its text format; Tofino ``externs`` blocks become registers/counters.

    The Tofino compiler lists the TNA ``Register`` and ``Counter`` instances as top-level
    ``externs`` whose ``info`` is an ``Any`` of a type (``barefoot.Register``, ...) that no
    installed descriptor knows, so text_format cannot parse them. Their instances (id, name,
    alias, size, register width, counter unit) are added as P4Info ``registers`` and
    ``counters`` instead, the shape the v1model P4Info has, so the controller reads the slot
    pool and the counter names the same way on both; other extern types (PortMetadata,
    Snapshot) are dropped.
    """
    from google.protobuf import text_format

    kept: list[str] = []
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if blocks and blocks[-1] and blocks[-1][-1] != "}":
            blocks[-1].append(line)
            if line.startswith("}"):
                blocks[-1].append("}")      # marks the block closed
            continue
        if line.startswith("externs {"):
            blocks.append([line])
            continue
        kept.append(line)
    info = p4i.P4Info()
    text_format.Parse("\n".join(kept), info)
    for block in blocks:
        body = "\n".join(block)
        kind = re.search(r'extern_type_name: "(\w+)"', body)
        if kind is None or kind.group(1) not in ("Register", "Counter"):
            continue
        for inst in re.split(r"\n  instances \{", body)[1:]:
            pid = int(re.search(r"id: (\d+)", inst).group(1))
            name = re.search(r'name: "([^"]+)"', inst).group(1)
            alias = re.search(r'alias: "([^"]+)"', inst)
            size = re.search(r"\bsize: (\d+)", inst)
            ent = info.registers.add() if kind.group(1) == "Register" else info.counters.add()
            ent.preamble.id = pid
            ent.preamble.name = name
            ent.preamble.alias = alias.group(1) if alias else name
            ent.size = int(size.group(1)) if size else 0
            if kind.group(1) == "Register":
                width = re.search(r"bitwidth: (\d+)", inst)
                ent.type_spec.bitstring.bit.bitwidth = int(width.group(1)) if width else 32
            if kind.group(1) == "Counter":
                unit = re.search(r"unit: (\w+)", inst)
                ent.spec.unit = p4i.CounterSpec.Unit.Value(unit.group(1)) if unit else 0
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
