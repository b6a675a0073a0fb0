"""Event simulation: schedule structure, agreement with the analytical model in the trivial
cases (no communication, total overlap, zero overlap), and link contention."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from control_plane.scaleacross.cost import evaluate
from control_plane.scaleacross.plan import Plan
from control_plane.scaleacross.simulate import schedule_order, simulate
from tests.support.scaleacross import scenario

#: links so fast and latencies zero that communication takes no time
FREE_NET = {"nvlink_gbps": 1e12, "nic_gbps": 1e12, "nvlink_latency_us": 0,
            "nic_latency_us": 0}


def analytic(sc, pl):
    return {k: np.asarray(v)[0] for k, v in evaluate(sc, pl.to_arrays()).items()}


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 1), (4, 3, 1), (4, 8, 2), (3, 6, 4)])
def test_schedule_runs_every_op_once_forward_first(p, m, v):
    for stage in range(p):
        order = schedule_order(stage, p, m, v)
        assert Counter(order) == Counter(
            (k, mb, c) for k in "FB" for mb in range(m) for c in range(v))
        pos = {op: i for i, op in enumerate(order)}
        assert all(pos[("F", mb, c)] < pos[("B", mb, c)] for mb in range(m) for c in range(v))
    if v == 1:  # 1F1B: stage i warms up with p - i - 1 forwards
        first_b = [next(i for i, op in enumerate(schedule_order(s, p, m, 1)) if op[0] == "B")
                   for s in range(p)]
        warm = [min(p - s - 1, m) for s in range(p)]
        assert first_b == [w + (w < m) for w in warm]


@pytest.mark.parametrize("v", [1, 2])
def test_no_communication_matches_the_bubble_formula(v):
    sc = scenario(model={"vocab": 8}, hardware=FREE_NET,
                  cluster={"cross_building": {"latency_us": 0}}, training={"global_batch": 16})
    pl = Plan(tp=1, pp=4, dp=1, microbatch=1, interleave=v, recompute="none", zero=0)
    a, s = analytic(sc, pl), simulate(sc, pl)
    ideal = (16 + 3 / v) * a["tau_s"]
    assert s.pipeline_s == pytest.approx(ideal, rel=1e-3)
    assert a["iteration_s"] == pytest.approx(s.iteration_s, rel=1e-3)


def test_total_overlap_hides_the_dp_sync_in_both():
    sc = scenario(model={"vocab": 8}, training={"global_batch": 64},
                  hardware={"nic_gbps": 1e6, "nic_latency_us": 0})
    pl = Plan(tp=1, pp=2, dp=8, microbatch=1, recompute="none", overlap_dp=True)
    a, s = analytic(sc, pl), simulate(sc, pl)
    assert a["dp_sync_s"] > 0
    assert a["dp_comm"] == 0 and s.dp_exposed_s == 0
    assert a["iteration_s"] == pytest.approx(s.iteration_s, rel=0.01)


def test_zero_overlap_adds_the_whole_dp_sync_in_both():
    sc = scenario(training={"global_batch": 64})
    pl = Plan(tp=8, pp=1, dp=16, microbatch=1, recompute="none", overlap_dp=False,
              cross="dp", dp_sync="ring", sequence_parallel=True)
    a, s = analytic(sc, pl), simulate(sc, pl)
    assert a["dp_comm"] == pytest.approx(a["dp_sync_s"], rel=1e-9)
    assert s.dp_exposed_s == pytest.approx(a["dp_sync_s"], rel=1e-9)
    assert s.iteration_s == pytest.approx(a["iteration_s"], rel=1e-6)
    # overlap can only help, in both models
    on = replace(pl, overlap_dp=True)
    assert analytic(sc, on)["iteration_s"] < a["iteration_s"]
    assert simulate(sc, on).iteration_s < s.iteration_s


def test_cross_building_transfers_contend_on_the_uplink():
    # PP split over two buildings with a thin uplink: every microbatch's activations and
    # gradients queue on it, so the pipeline cannot beat the link's busy time
    sc = scenario(cluster={"cross_building": {"gbps": 50, "latency_us": 100}},
                  training={"global_batch": 64})
    pl = Plan(tp=8, pp=2, dp=8, microbatch=1, interleave=2, recompute="none", cross="pp",
              sequence_parallel=True)
    s = simulate(sc, pl)
    a = analytic(sc, pl)
    assert a["placeable"] and a["buildings_used"] == 2
    m = 64 // 8
    per_transfer = a["x_bytes"] / a["uplink_min"]
    # building A (stage 0) sends v=2 forward and v-1=1 wrap-around gradient per microbatch
    assert s.link_busy_s["up:A"] == pytest.approx(3 * m * per_transfer, rel=1e-9)
    assert s.pipeline_s >= s.link_busy_s["up:A"]
    faster = scenario(cluster={"cross_building": {"gbps": 5000, "latency_us": 100}},
                      training={"global_batch": 64})
    assert simulate(faster, pl).pipeline_s < s.pipeline_s
    assert a["pp_comm"] > 0
