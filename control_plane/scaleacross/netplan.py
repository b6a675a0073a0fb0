"""Plan -> network: the file a controller installs (schema in ``docs/scaleacross.md``).

It holds the rank-to-host/building mapping, the traffic classes with their volumes per
iteration, the cross-building flows with explicit paths (pinned to one uplink or split over the
parallel uplinks) and, for every DP group, its aggregation tree: one leaf per building (that
building's aggregation switch, summing the group's ranks there) under a parent (the
cross-building aggregation switch ``xcore`` for in-network aggregation/THC, else a ring of the
building leaves).

The cross-building network is a star: each building ``B`` reaches the cross-building layer
``xcore`` over links ``B-x0 .. B-x{k-1}`` (``cluster.cross_building.parallel_links``).
"""

from __future__ import annotations

import numpy as np

from control_plane.scaleacross import formulas as fm
from control_plane.scaleacross.cost import Efficiency, building_fill, evaluate
from control_plane.scaleacross.plan import Plan
from control_plane.scaleacross.scenario import Scenario

__all__ = ["PLAN_VERSION", "build_network_plan", "rank_layout"]

PLAN_VERSION = 1
XCORE = "xcore"


def rank_layout(sc: Scenario, pl: Plan) -> list[dict]:
    """Every rank's coordinates and place, ranks numbered building by building.

    Inside a building the order is TP (fastest), CP, DP, PP, so TP and CP groups share a node
    when they fit. ``cross = dp`` gives each building a block of DP replicas; ``cross = pp`` a
    block of pipeline stages; ``none`` puts everything in the largest building.
    """
    gpn = sc.hardware.gpus_per_node
    blds = sc.cluster.buildings
    if pl.cross == "none":
        units, slice_gpus = 1, pl.world
    elif pl.cross == "dp":
        units, slice_gpus = pl.dp, pl.tp * pl.cp * pl.pp
    else:
        units, slice_gpus = pl.pp, pl.tp * pl.cp * pl.dp
    k, used = building_fill(sc, np.array([units]), np.array([slice_gpus]))
    if used[0] == 0:
        raise ValueError("plan does not place on the buildings")
    order = sorted(range(len(blds)), key=lambda j: -blds[j].gpus)
    out: list[dict] = []
    rank = 0
    offset = 0
    for j in order:
        n_units = int(k[0, j])
        if n_units == 0:
            continue
        if pl.cross == "dp":
            dps, pps = range(offset, offset + n_units), range(pl.pp)
        elif pl.cross == "pp":
            dps, pps = range(pl.dp), range(offset, offset + n_units)
        else:
            dps, pps = range(pl.dp), range(pl.pp)
        offset += n_units
        local = 0
        for pi in pps:
            for di in dps:
                for ci in range(pl.cp):
                    for ti in range(pl.tp):
                        out.append({
                            "rank": rank, "building": blds[j].name,
                            "host": f"{blds[j].name}-n{local // gpn:04d}", "gpu": local % gpn,
                            "tp": ti, "cp": ci, "dp": di, "pp": pi,
                            "ep": di % pl.ep,
                        })
                        rank += 1
                        local += 1
    return out


def _paths(sc: Scenario, src: str, dst: str) -> list[dict]:
    """Explicit paths between two buildings (or a building and ``xcore``) over the uplinks."""
    n = sc.cluster.cross_building.parallel_links
    share = round(1.0 / n, 6)
    out = []
    for i in range(n):
        hops = [src] if src == XCORE else [src, f"{src}-x{i}", XCORE]
        if dst != XCORE:
            hops += [f"{dst}-x{i}", dst]
        out.append({"hops": hops, "share": share})
    return out


def build_network_plan(sc: Scenario, pl: Plan, eff: Efficiency | None = None) -> dict:
    """The network plan of ``pl`` on ``sc`` as a JSON-ready dict (``version`` 1)."""
    r = {k: np.asarray(v)[0] for k, v in evaluate(sc, pl.to_arrays(), eff).items()}
    md = sc.model
    by = sc.wire_bytes  # activations on the wire
    ranks = rank_layout(sc, pl)
    m = pl.microbatches(sc.global_batch)
    s_c = md.seq / pl.cp
    L_s = md.layers / pl.pp
    n_ar = 6 if pl.recompute == "full" else 4
    tp_msg = pl.microbatch * s_c * md.hidden * by
    tp_bytes = m * L_s * n_ar * 2 * (pl.tp - 1) / pl.tp * tp_msg if pl.tp > 1 else 0.0
    p2p = float(r["p2p_bytes"])
    pr = fm.model_params(md)
    psi_stage = ((pr["dense"] - (md.vocab + md.seq) * md.hidden) * L_s / md.layers
                 + (md.vocab + md.seq) * md.hidden) / pl.tp
    grad = psi_stage * 2.0
    n_dp = pl.dp * pl.cp
    dp_rank_bytes = 2 * (n_dp - 1) / n_dp * grad if n_dp > 1 else 0.0

    by_coord = {(x["tp"], x["cp"], x["dp"], x["pp"]): x for x in ranks}
    stage_bld = {x["pp"]: x["building"] for x in ranks if x["dp"] == 0 and x["tp"] == 0
                 and x["cp"] == 0} if pl.cross == "pp" else {}

    classes: list[dict] = []
    classes.append({"class": "tp", "groups": pl.world // pl.tp, "group_size": pl.tp,
                    "bytes_per_rank_per_iteration": tp_bytes, "crosses_buildings": False,
                    "priority": 0})
    if pl.cp > 1:
        classes.append({"class": "cp", "groups": pl.world // pl.cp, "group_size": pl.cp,
                        "crosses_buildings": False, "priority": 0,
                        "bytes_per_rank_per_iteration": m * L_s * 3 * (pl.cp - 1) * 2
                        * pl.microbatch * s_c * md.hidden * md.kv / md.heads * by / pl.tp})
    boundaries = []
    for i in range(pl.pp - 1 + (1 if pl.interleave > 1 else 0)):
        a, b = i, (i + 1) % pl.pp
        n_chunks = pl.interleave if b > a else pl.interleave - 1
        vol = m * n_chunks * p2p * pl.tp * pl.cp * pl.dp
        src_b = stage_bld.get(a, ranks[0]["building"])
        dst_b = stage_bld.get(b, ranks[0]["building"])
        boundaries.append({"from_stage": a, "to_stage": b, "from_building": src_b,
                           "to_building": dst_b, "bytes_per_iteration_each_way": vol,
                           "crosses_buildings": src_b != dst_b})
    if boundaries:
        classes.append({"class": "pp", "priority": 1, "boundaries": boundaries,
                        "bytes_per_transfer_per_rank": p2p})
    if md.is_moe and pl.ep > 1:
        a2a = pl.microbatch * s_c * md.top_k * md.capacity_factor * md.hidden * by / pl.tp
        n_a2a = (6 if pl.recompute == "full" else 4) * md.moe_layers / pl.pp
        classes.append({"class": "ep", "priority": 1, "groups": pl.world // pl.ep,
                        "group_size": pl.ep, "crosses_buildings": bool(r["ep_crosses"]),
                        "bytes_per_rank_per_iteration": m * n_a2a * (pl.ep - 1) / pl.ep * a2a})
    if md.is_moe and pl.ep > 1:
        n_edp = max(n_dp // pl.ep, 1)
        psi_exp = pr["expert"] * L_s / md.layers / (pl.tp * pl.ep)
        classes.append({"class": "expert_dp", "priority": 2, "groups": pl.world // n_edp,
                        "group_size": n_edp, "method": pl.dp_sync,
                        "crosses_buildings": pl.cross == "dp" and n_edp > 1
                        and int(r["buildings_used"]) > 1,
                        "bytes_per_rank_per_iteration":
                        2 * (n_edp - 1) / n_edp * psi_exp * 2.0 if n_edp > 1 else 0.0})
    dp_cross = pl.cross == "dp" and int(r["buildings_used"]) > 1
    classes.append({"class": "dp", "priority": 2, "groups": pl.world // n_dp,
                    "group_size": n_dp, "method": pl.dp_sync, "crosses_buildings": dp_cross,
                    "bytes_per_rank_per_iteration": dp_rank_bytes})

    # ---- cross-building flows with explicit paths
    flows: list[dict] = []
    mode = "split" if sc.cluster.cross_building.parallel_links > 1 else "pinned"
    for bd in boundaries:
        if not bd["crosses_buildings"]:
            continue
        for cls, src, dst in (("pp_activations", bd["from_building"], bd["to_building"]),
                              ("pp_gradients", bd["to_building"], bd["from_building"])):
            flows.append({"class": cls, "src": src, "dst": dst,
                          "stages": [bd["from_stage"], bd["to_stage"]],
                          "bytes_per_iteration": bd["bytes_per_iteration_each_way"],
                          "mode": mode, "paths": _paths(sc, src, dst)})
    trees: list[dict] = []
    blds_used = sorted({x["building"] for x in ranks},
                       key=lambda n: [b.name for b in sc.cluster.buildings].index(n))
    G = len(blds_used)
    # whole replica's gradient bytes: dense shards of every stage plus every expert
    stage_full = grad * pl.tp * pl.pp + 2.0 * pr["expert"]
    if dp_cross:
        if pl.dp_sync in ("ina", "thc"):
            up = stage_full * (0.25 if pl.dp_sync == "thc" else 1.0)
            down = stage_full * (0.5 if pl.dp_sync == "thc" else 1.0)
            for b in blds_used:
                flows.append({"class": f"dp_{pl.dp_sync}_up", "src": b, "dst": XCORE,
                              "bytes_per_iteration": up, "mode": mode,
                              "paths": _paths(sc, b, XCORE)})
                flows.append({"class": f"dp_{pl.dp_sync}_down", "src": XCORE, "dst": b,
                              "bytes_per_iteration": down, "mode": mode,
                              "paths": _paths(sc, XCORE, b)})
        else:
            ring = 2 * (G - 1) / G * stage_full if pl.dp_sync == "hierarchical" else (
                2 * (n_dp - 1) / n_dp * stage_full)
            for i, b in enumerate(blds_used):
                nb = blds_used[(i + 1) % G]
                flows.append({"class": f"dp_{pl.dp_sync}", "src": b, "dst": nb,
                              "bytes_per_iteration": ring, "mode": mode,
                              "paths": _paths(sc, b, nb)})
    # ---- aggregation trees: one per DP group (stage, tp rank, cp rank share a group)
    for pi in range(pl.pp):
        for ti in range(pl.tp):
            members = [by_coord[(ti, ci, di, pi)] for di in range(pl.dp) for ci in range(pl.cp)]
            leaves = []
            for b in sorted({x["building"] for x in members}, key=blds_used.index):
                parent = XCORE if (dp_cross and pl.dp_sync in ("ina", "thc")) else (
                    "ring" if dp_cross else None)
                leaves.append({"building": b, "aggregator": f"{b}-agg",
                               "ranks": [x["rank"] for x in members if x["building"] == b],
                               "parent": parent})
            trees.append({"group": {"pp": pi, "tp": ti}, "method": pl.dp_sync,
                          "root": XCORE if dp_cross and pl.dp_sync in ("ina", "thc")
                          else leaves[0]["aggregator"],
                          "compression": {"up_bits": 4, "down_bits": 8}
                          if pl.dp_sync == "thc" else None,
                          "leaves": leaves})
    links = []
    xb = sc.cluster.cross_building
    for b in sc.cluster.buildings:
        for i in range(xb.parallel_links):
            links.append({"name": f"{b.name}-x{i}", "building": b.name, "peer": XCORE,
                          "gbps": b.uplink_gbps / xb.parallel_links if b.uplink_gbps
                          else xb.gbps})
    return {
        "version": PLAN_VERSION,
        "scenario": sc.name,
        "plan": pl.to_dict(),
        "predicted": {"iteration_s": float(r["iteration_s"]),
                      "memory_gb_per_gpu": float(r["memory_gb_per_gpu"]),
                      "fits": bool(r["fits"])},
        "buildings": [{"name": b.name, "gpus": b.gpus,
                       "ranks": sum(1 for x in ranks if x["building"] == b.name)}
                      for b in sc.cluster.buildings],
        "cross_links": links,
        "ranks": ranks,
        "traffic_classes": classes,
        "cross_building_flows": flows,
        "aggregation_trees": trees,
    }
