"""Search of the plan space: enumerate, price every plan at once (numpy), rank.

The space: TP (divisors of the heads up to the NVLink domain), CP (1, 2, 4 while the per-rank
sequence stays >= 1024), PP (divisors of the layers, <= 64), interleaving v (divisors of the
layers per stage, <= 8), microbatch (1, 2, 4), DP (the largest degrees that divide the batch,
plus the largest that stays inside one building), EP (divisors of the experts that divide DP),
recompute (none, selective, full), which dimension crosses buildings (none, DP, PP), and the DP
sync method (flat ring, hierarchical, in-network aggregation and THC when the cluster has the
switch), ZeRO stage 1-3, overlap of the DP sync with backward and of the EP all-to-all with
compute on or off. Sequence parallelism is on with TP. Fields given in the scenario's
``parallel`` section pin that dimension.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass

import numpy as np

from control_plane.scaleacross.cost import (
    BREAKDOWN_KEYS,
    COLUMNS,
    CROSS_CODES,
    RECOMPUTE_CODES,
    SYNC_CODES,
    Efficiency,
    Plans,
    evaluate,
)
from control_plane.scaleacross.plan import Plan, check_plan, plans_to_list
from control_plane.scaleacross.scenario import Scenario, ScenarioError

__all__ = ["SearchResult", "enumerate_plans", "megatron_default", "ranked", "search"]

log = logging.getLogger(__name__)
CHUNK = 200_000


def _divisors(n: int, limit: int | None = None) -> list[int]:
    return [x for x in range(1, n + 1) if n % x == 0 and (limit is None or x <= limit)]


def _dp_choices(sc: Scenario, slice_gpus: int, b: int, ep_min: int) -> list[int]:
    """DP degrees to try for one (t, c, p, b): the two largest that fit the cluster and the
    largest inside the biggest building."""
    B = sc.global_batch
    total = sc.cluster.total_gpus
    big = max(x.gpus for x in sc.cluster.buildings)
    ok = [d for d in _divisors(B // b) if B % (b * d) == 0 and d % ep_min == 0]
    fit = [d for d in ok if d * slice_gpus <= total]
    inside = [d for d in ok if d * slice_gpus <= big]
    out = set(fit[-3:]) | set(inside[-1:])
    return sorted(out)


def enumerate_plans(sc: Scenario) -> Plans:
    """The candidate plans of ``sc`` as a table of columns (see :data:`cost.COLUMNS`)."""
    md, hw, pr = sc.model, sc.hardware, sc.parallel
    xb = sc.cluster.cross_building

    def pick(fixed, choices):
        return [fixed] if fixed is not None else choices

    tps = pick(pr.tp, [t for t in _divisors(md.heads, hw.gpus_per_node)
                       if md.kv % t == 0 or t % md.kv == 0])
    cps = pick(pr.cp, [c for c in (1, 2, 4, 8) if md.seq % c == 0 and md.seq // c >= 1024
                       and c <= hw.gpus_per_node])
    pps = pick(pr.pp, _divisors(sc.stage_units, 64))
    mbs = pick(pr.microbatch, [1, 2, 4, 8])
    eps_all = [e for e in _divisors(md.experts, 64)] if md.is_moe else [1]
    eps = pick(pr.ep, eps_all)
    rcs = [RECOMPUTE_CODES[x] for x in pick(pr.recompute, ["none", "selective", "full"])]
    crosses = [CROSS_CODES[x] for x in pick(None if pr.cross in (None, "auto") else pr.cross,
                                            ["none", "dp", "pp"])]
    syncs = ["ring", "hierarchical"] + (["ina"] if xb.ina else []) + (["thc"] if xb.thc else [])
    syncs = [SYNC_CODES[x] for x in pick(pr.dp_sync, syncs)]
    zeros = pick(pr.zero, [1, 2, 3])
    odps = [int(x) for x in pick(pr.overlap_dp, [True, False])]
    oeps = [int(x) for x in pick(pr.overlap_ep, [True, False] if md.is_moe else [False])]

    base = []
    for t, c, p, b in itertools.product(tps, cps, pps, mbs):
        per = sc.stage_units // p
        vs = pick(pr.interleave, [v for v in _divisors(per, 8) if v == 1 or p > 1])
        dps = [pr.dp] if pr.dp is not None else _dp_choices(sc, t * c * p, b, min(eps))
        for d in dps:
            if sc.global_batch % (b * d):
                continue
            m = sc.global_batch // (b * d)
            for v in vs:
                if per % v or (v > 1 and (p == 1 or m % p)):
                    continue
                for e in eps:
                    if d % e:
                        continue
                    base.append((t, p, d, e, c, b, v))
    if not base:
        raise ScenarioError("parallel: no layout satisfies the fixed fields and the batch; "
                            "relax parallel.* or change training.global_batch")
    base_arr = np.array(base, dtype=np.int64)
    combos = []
    for rc in rcs:
        for cr in crosses:
            other = [SYNC_CODES[pr.dp_sync] if pr.dp_sync else SYNC_CODES["ring"]]
            for sy in syncs if cr == CROSS_CODES["dp"] else other:
                for z, od, oe in itertools.product(zeros, odps, oeps):
                    combos.append((rc, cr, sy, z, od, oe))
    combo_arr = np.array(combos, dtype=np.int64)
    nb, nc = len(base_arr), len(combo_arr)
    bi = np.repeat(np.arange(nb), nc)
    ci = np.tile(np.arange(nc), nb)
    cols = dict(zip(("tp", "pp", "dp", "ep", "cp", "mb", "v"), base_arr[bi].T, strict=True))
    cols["rc"], cols["cross"], cols["sync"], cols["zero"], cols["odp"], cols["oep"] = \
        combo_arr[ci].T
    n = nb * nc
    sp_fixed = pr.sequence_parallel
    cols["sp"] = (cols["tp"] > 1) if sp_fixed is None else np.full(n, int(sp_fixed))
    cols["sp"] = cols["sp"].astype(np.int64)
    return {k: np.ascontiguousarray(cols[k]) for k in COLUMNS}


@dataclass
class SearchResult:
    plans: Plans
    metrics: dict[str, np.ndarray]
    order: np.ndarray  # indices of feasible plans, fastest first
    seconds: float

    @property
    def n_total(self) -> int:
        return int(self.plans["tp"].size)

    @property
    def n_feasible(self) -> int:
        return int(self.order.size)


def search(sc: Scenario, eff: Efficiency | None = None, progress: bool = False) -> SearchResult:
    """Price every candidate plan and rank the feasible ones (fit in memory, placeable)."""
    t0 = time.perf_counter()
    P = enumerate_plans(sc)
    n = P["tp"].size
    keys = ("iteration_s", "memory_gb_per_gpu", "fits", "placeable", "buildings_used",
            "ep_crosses", *BREAKDOWN_KEYS)
    out = {k: [] for k in keys}
    chunks = range(0, n, CHUNK)
    if progress:
        from tqdm import tqdm

        chunks = tqdm(chunks, desc="pricing plans", unit="chunk", leave=False)
    for lo in chunks:
        sub = {k: v[lo:lo + CHUNK] for k, v in P.items()}
        r = evaluate(sc, sub, eff)
        for k in keys:
            out[k].append(np.asarray(r[k]))
    metrics = {k: np.concatenate(v) for k, v in out.items()}
    ok = metrics["fits"] & metrics["placeable"]
    idx = np.flatnonzero(ok)
    # fastest first; equal times (to 1 us) go to the plan that needs less memory
    order = idx[np.lexsort((metrics["memory_gb_per_gpu"][idx],
                            np.round(metrics["iteration_s"][idx], 6)))]
    dt = time.perf_counter() - t0
    log.info("priced %d plans (%d feasible) in %.2f s", n, order.size, dt)
    return SearchResult(P, metrics, order, dt)


#: columns that make two plans different layouts (the rest: ZeRO stage, DP sync, overlap)
LAYOUT = ("tp", "pp", "dp", "ep", "cp", "mb", "v", "rc", "cross")


def ranked(res: SearchResult, top: int, distinct: bool = False) -> list[tuple[Plan, dict]]:
    """The ``top`` fastest plans with their metrics (breakdown in seconds).

    ``distinct`` keeps only the fastest plan of each layout (see :data:`LAYOUT`).
    """
    out = []
    seen: set[tuple[int, ...]] = set()
    for i in res.order:
        if len(out) >= top:
            break
        if distinct:
            key = tuple(int(res.plans[k][i]) for k in LAYOUT)
            if key in seen:
                continue
            seen.add(key)
        pl = plans_to_list(res.plans, [i])[0]
        met = {k: float(res.metrics[k][i]) for k in ("iteration_s", "memory_gb_per_gpu")}
        met["breakdown"] = {k: float(res.metrics[k][i]) for k in BREAKDOWN_KEYS}
        met["buildings_used"] = int(res.metrics["buildings_used"][i])
        met["ep_crosses_buildings"] = bool(res.metrics["ep_crosses"][i])
        out.append((pl, met))
    return out


def megatron_default(sc: Scenario, eff: Efficiency | None = None) -> Plan:
    """The Megatron-style default the paper compares against.

    TP = the NVLink domain (largest divisor of the heads <= GPUs per node), PP across nodes
    (the smallest divisor of the layers that fits memory with selective recompute), DP
    outermost over as many GPUs as the batch allows, EP as large as the experts and DP allow,
    microbatch 1, plain 1F1B, flat-ring DP sync with overlap, no cross-building awareness
    (the rank order simply fills the buildings, so the DP dimension crosses them).
    """
    md, hw = sc.model, sc.hardware
    t = max(x for x in _divisors(md.heads, hw.gpus_per_node) if md.kv % x == 0 or x % md.kv == 0)
    total = sc.cluster.total_gpus
    big = max(x.gpus for x in sc.cluster.buildings)
    for p in _divisors(sc.stage_units):
        d = total // (t * p)
        while d > 0 and sc.global_batch % d:
            d -= 1
        if d == 0:
            continue
        e = max(x for x in _divisors(md.experts) if d % x == 0) if md.is_moe else 1
        pl = Plan(tp=t, pp=p, dp=d, ep=e, cp=1, microbatch=1, interleave=1,
                  recompute="selective", sequence_parallel=t > 1, zero=1,
                  cross="none" if t * p * d <= big else "dp", dp_sync="ring",
                  overlap_dp=True, overlap_ep=False)
        try:
            check_plan(sc, pl)
        except ScenarioError:
            continue
        r = evaluate(sc, pl.to_arrays(), eff)
        if bool(r["fits"][0]) and bool(r["placeable"][0]):
            return pl
    raise ScenarioError("model: no Megatron-style default fits this cluster's memory")
