"""ScaleAcross Explorer benchmark: best searched plan vs the Megatron-style default.

For every scenario in ``control_plane/scaleacross/scenarios`` (or the files given): search time,
the best plan and its breakdown, the Megatron-style default (TP in the node, PP across nodes,
DP outermost, flat ring, no cross-building awareness), the gain of the best plan in the
analytical model and in the event simulation, and the analytical-vs-simulated disagreement on a
random sample of feasible plans. Prints one JSON object with ``--json``.

    .venv/bin/python benchmarks/scaleacross.py --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from control_plane.scaleacross.cost import BREAKDOWN_KEYS, evaluate
from control_plane.scaleacross.plan import plans_to_list
from control_plane.scaleacross.scenario import load_scenario
from control_plane.scaleacross.search import megatron_default, ranked, search
from control_plane.scaleacross.simulate import simulate
from host.paths import SCALEACROSS_SCENARIOS

SCEN_DIR = SCALEACROSS_SCENARIOS
SIM_OPS = 200_000


def _sim(sc, pl) -> float | None:
    if 2 * pl.pp * pl.interleave * pl.microbatches(sc.global_batch) > SIM_OPS:
        return None
    return simulate(sc, pl).iteration_s


def run_one(path: Path, sample: int, rng: np.random.Generator) -> dict:
    sc = load_scenario(path)
    t0 = time.perf_counter()
    res = search(sc)
    search_s = time.perf_counter() - t0
    best, met = ranked(res, 1)[0]
    base = megatron_default(sc)
    rb = evaluate(sc, base.to_arrays())
    base_t = float(rb["iteration_s"][0])
    best_sim, base_sim = _sim(sc, best), _sim(sc, base)
    # ablation: the default's layout with only the DP sync made building-aware
    syncs = ["hierarchical"] + (["ina"] if sc.cluster.cross_building.ina else []) + (
        ["thc"] if sc.cluster.cross_building.thc else [])
    aware = min((float(evaluate(sc, replace(base, dp_sync=sy).to_arrays())["iteration_s"][0]), sy)
                for sy in syncs) if base.cross == "dp" else (base_t, base.dp_sync)
    # sensitivity: the same comparison if a cross-building hop cost no more latency than a hop
    # inside the building (removes the default's per-step ring latency, 2(n-1)*alpha_x)
    low = replace(sc, cluster=replace(sc.cluster, cross_building=replace(
        sc.cluster.cross_building, latency_us=sc.hardware.nic_latency_us)))
    low_best = ranked(search(low), 1)[0][1]["iteration_s"]
    low_base = float(evaluate(low, megatron_default(low).to_arrays())["iteration_s"][0])
    errs = []
    if sample:
        pick = rng.choice(res.order, size=min(sample, res.n_feasible), replace=False)
        for i in pick:
            pl = plans_to_list(res.plans, [i])[0]
            s = _sim(sc, pl)
            if s is not None:
                errs.append(float(res.metrics["iteration_s"][i]) / s - 1)
    e = np.abs(errs) if errs else np.array([np.nan])
    return {
        "scenario": sc.name,
        "gpus": sc.cluster.total_gpus,
        "buildings": len(sc.cluster.buildings),
        "oversubscription": sc.cluster.cross_building.oversubscription,
        "cross_latency_us": sc.cluster.cross_building.latency_us,
        "model": sc.model.name,
        "plans_priced": res.n_total,
        "plans_feasible": res.n_feasible,
        "search_s": round(search_s, 3),
        "best": {"plan": best.to_dict(), "iteration_s": met["iteration_s"],
                 "simulated_s": best_sim,
                 "breakdown": {k: round(v, 4) for k, v in met["breakdown"].items()}},
        "megatron_default": {"plan": base.to_dict(), "iteration_s": base_t,
                             "simulated_s": base_sim,
                             "breakdown": {k: round(float(rb[k][0]), 4)
                                           for k in BREAKDOWN_KEYS}},
        "gain_pct": round(100 * (1 - met["iteration_s"] / base_t), 2),
        "megatron_with_aware_sync": {"dp_sync": aware[1], "iteration_s": aware[0],
                                     "gain_pct": round(100 * (1 - aware[0] / base_t), 2)},
        "gain_pct_if_cross_latency_were_intra": round(100 * (1 - low_best / low_base), 2),
        "gain_simulated_pct": (round(100 * (1 - best_sim / base_sim), 2)
                               if best_sim and base_sim else None),
        "analytic_vs_sim": {"plans": len(errs), "mean_abs_pct": round(100 * float(e.mean()), 2),
                            "max_abs_pct": round(100 * float(e.max()), 2)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", help="scenario files (default: the shipped set)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--sample", type=int, default=20,
                    help="random feasible plans per scenario to simulate (default 20)")
    args = ap.parse_args(argv)
    paths = [Path(p) for p in args.scenarios] or sorted(SCEN_DIR.glob("*.json"))
    rng = np.random.default_rng(0)
    rows = [run_one(p, args.sample, rng) for p in paths]
    gains = [r["gain_pct"] for r in rows]
    big = [r for r in rows if r["gpus"] >= 4096 and r["buildings"] == 3]
    out = {
        "scenarios": rows,
        "summary": {
            "gain_pct_min": min(gains), "gain_pct_median": float(np.median(gains)),
            "gain_pct_max": max(gains),
            "scenarios_with_gain_ge_25pct": sum(g >= 25 for g in gains),
            "scenarios": len(rows),
            "search_s_max_4096gpus_3buildings": max((r["search_s"] for r in big), default=None),
            "search_s_max": max(r["search_s"] for r in rows),
        },
    }
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for r in rows:
            base = r["megatron_default"]["iteration_s"]
            print(f"{r['scenario']:<22} search {r['search_s']:4.2f} s  best "
                  f"{r['best']['iteration_s']:.3f} s  Megatron {base:.3f} s  "
                  f"gain {r['gain_pct']:5.1f}% (sim {r['gain_simulated_pct']}%, "
                  f"sync-only {r['megatron_with_aware_sync']['gain_pct']}%, "
                  f"low-latency {r['gain_pct_if_cross_latency_were_intra']}%)")
        print(json.dumps(out["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
