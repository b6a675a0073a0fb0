"""Small scenarios shared by the ScaleAcross tests."""

from __future__ import annotations

import copy

from control_plane.scaleacross.scenario import Scenario, parse_scenario

SMALL = {
    "name": "small",
    "model": {"layers": 16, "hidden": 2048, "heads": 16, "seq": 2048, "vocab": 32000},
    "hardware": {"peak_tflops": 312, "memory_gb": 80, "gpus_per_node": 8, "nvlink_gbps": 2400,
                 "nic_gbps": 200},
    "cluster": {"buildings": [{"name": "A", "gpus": 64}, {"name": "B", "gpus": 64}],
                "cross_building": {"latency_us": 300, "oversubscription": 4}},
    "training": {"global_batch": 256},
}


def raw(**sections) -> dict:
    """A deep copy of :data:`SMALL` with ``sections`` merged in (dicts merge one level)."""
    out = copy.deepcopy(SMALL)
    for key, val in sections.items():
        if isinstance(val, dict) and isinstance(out.get(key), dict):
            out[key].update(val)
        else:
            out[key] = val
    return out


def scenario(**sections) -> Scenario:
    return parse_scenario(raw(**sections))
