#!/usr/bin/env python3
"""FIELDING benchmark; prints one JSON object.

* ``clusterer``: seconds of :meth:`FieldingClusterer.observe` for the initial clustering of N
  clients (K by silhouette over 2..8) and for one round where 10% of them drift, N in
  {20, 50, 200};
* ``comparison``: wall time of the full comparison (six methods x three drift scenarios,
  digits, 40 clients, 30 rounds) and FIELDING's gain over the best baseline in each.

Usage: ``PYTHONPATH=. python benchmarks/fielding.py [--quick]`` (``--quick``: clusterer only).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from control_plane.fielding.clusterer import FieldingClusterer
from control_plane.fielding.config import FieldingConfig


def bench_clusterer(n: int, dim: int = 90, groups: int = 5, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    centres = rng.random((groups, dim)) * 2
    reps = {c: centres[c % groups] + 0.05 * rng.standard_normal(dim) for c in range(n)}
    cl = FieldingClusterer(FieldingConfig())
    t0 = time.perf_counter()
    cl.observe(reps)
    t_init = time.perf_counter() - t0
    movers = rng.choice(n, max(1, n // 10), replace=False)
    drift = {int(c): centres[(int(c) + 1) % groups] + 0.05 * rng.standard_normal(dim)
             for c in movers}
    t0 = time.perf_counter()
    up = cl.observe(drift)
    t_drift = time.perf_counter() - t0
    return {"clients": n, "dim": dim, "initial_s": round(t_init, 4), "k": len(cl.centres),
            "drift_round_s": round(t_drift, 4), "drift_reason": up.reason}


def bench_comparison() -> dict:
    from control_plane.fielding.harness import compare
    from control_plane.fielding.scenarios import make_scenario

    out = {}
    t_all = time.perf_counter()
    for kind in ("label", "feature", "concept"):
        t0 = time.perf_counter()
        res = compare(make_scenario(kind, "digits", 40, 30, 0))
        out[kind] = {"seconds": round(time.perf_counter() - t0, 2), **res["summary"]}
    out["total_seconds"] = round(time.perf_counter() - t_all, 2)
    return out


def main() -> int:
    result = {"clusterer": [bench_clusterer(n) for n in (20, 50, 200)]}
    if "--quick" not in sys.argv:
        result["comparison"] = bench_comparison()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
