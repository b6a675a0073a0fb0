"""Discrete-event simulation of one training iteration of a plan.

One pipeline replica is simulated op by op: each stage runs its forward/backward chunks for
every microbatch in the order of the 1F1B or interleaved-1F1B schedule (Narayanan et al. SC'21
§2.2, Megatron-LM's schedule); an op starts when its stage is free and its input has arrived.
Every activation/gradient transfer is a flow over link resources: a private NIC (or NVLink)
channel inside a building, or the shared uplink/downlink of the two buildings for a
cross-building boundary, each served first-come first-served (contention is queueing). The
other replicas are symmetric: a cross-building transfer carries the bytes of all ``t·c·d``
ranks of the stage. At the end, each stage's gradient sync (chunk by chunk, released at the
start of the chunk's last backward with ``overlap_dp``, else after the stage's last op) takes
its intra-building part on a private resource and its cross-building part on one shared
DP-uplink resource, then the optimizer step runs.

The per-op durations come from the same closed forms as :mod:`cost`; what the simulator adds
is the exact schedule, dependencies, latencies on the critical path and the contention.
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field

import numpy as np

from control_plane.scaleacross.cost import Efficiency, building_fill, evaluate
from control_plane.scaleacross.plan import Plan
from control_plane.scaleacross.scenario import Scenario

__all__ = ["Link", "SimResult", "schedule_order", "simulate"]

log = logging.getLogger(__name__)


@dataclass
class Link:
    """A FIFO link resource: one transfer at a time at ``bytes_s``, plus ``latency``."""

    name: str
    bytes_s: float
    latency: float
    free: float = 0.0
    busy: float = 0.0

    def reserve(self, now: float, nbytes: float) -> tuple[float, float]:
        start = max(now, self.free)
        dur = nbytes / self.bytes_s
        self.free = start + dur
        self.busy += dur
        return start, dur


@dataclass
class SimResult:
    iteration_s: float
    pipeline_s: float
    dp_exposed_s: float
    optimizer_s: float
    ops: int
    link_busy_s: dict[str, float] = field(default_factory=dict)
    stage_end_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "iteration_s": self.iteration_s, "pipeline_s": self.pipeline_s,
            "dp_exposed_s": self.dp_exposed_s, "optimizer_s": self.optimizer_s,
            "ops": self.ops, "link_busy_s": self.link_busy_s,
        }


def schedule_order(stage: int, p: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Ops of ``stage`` in execution order as ``(kind, microbatch, chunk)``.

    v = 1: 1F1B with ``p - stage - 1`` warm-up forwards. v > 1: Megatron's interleaved order,
    ``2(p - stage - 1) + (v - 1)p`` warm-up chunk forwards; the k-th forward runs chunk
    ``(k // p) % v`` of microbatch ``(k // pv)·p + k % p``, backwards visit chunks in reverse.
    """
    total = m * v
    # warm-up forwards: 1F1B, or Megatron's interleaved count
    warm = min(p - stage - 1, m) if v == 1 else min(2 * (p - stage - 1) + (v - 1) * p, total)

    def fwd(k: int) -> tuple[str, int, int]:
        return "F", (k // (p * v)) * p + k % p, (k // p) % v

    def bwd(k: int) -> tuple[str, int, int]:
        return "B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v

    order = [fwd(k) for k in range(warm)]
    for j in range(total - warm):
        order.append(fwd(warm + j))
        order.append(bwd(j))
    order.extend(bwd(j) for j in range(total - warm, total))
    return order


def simulate(sc: Scenario, plan: Plan, eff: Efficiency | None = None) -> SimResult:
    """Simulate one iteration of ``plan`` on ``sc``; see the module docstring."""
    eff = eff or Efficiency()
    r = {k: np.asarray(val)[0] if np.ndim(val) and np.shape(val)[0] == 1 else val
         for k, val in evaluate(sc, plan.to_arrays(), eff).items()}
    if not bool(r["placeable"]):
        raise ValueError(f"plan does not place on the buildings (cross={plan.cross})")
    p, v = plan.pp, plan.interleave
    m = plan.microbatches(sc.global_batch)
    if v > 1 and m % p:
        raise ValueError("interleaved schedule needs m % p == 0")
    hw, xb = sc.hardware, sc.cluster.cross_building
    comm = float(r["comm_mb"])
    fwd_stage = float(r["fwd_mb"]) / v
    bwd_stage = float(r["bwd_mb"]) / v
    rec_stage = float(r["rec_mb"]) / v
    logit = float(r["logit_mb"])
    share = float(r["comm_bwd_share"])
    f_dur = fwd_stage + comm * (1 - share) / v
    # the gradient-accumulation pass (``training.grad_accum_pass``) follows each backward
    b_dur = bwd_stage + rec_stage + comm * share / v + float(r["accum_mb"]) / v

    def dur(kind: str, stage: int, chunk: int) -> float:
        last = stage == p - 1 and chunk == v - 1
        if kind == "F":
            return f_dur + (logit if last else 0.0)
        return b_dur + (2 * logit if last else 0.0)

    # ---- stage -> building (cross = pp splits stages; otherwise one pipeline is in one place)
    bld_of_stage = [0] * p
    if plan.cross == "pp":
        k, _ = building_fill(sc, np.array([p]), np.array([plan.tp * plan.cp * plan.dp]))
        order = [j for j in range(k.shape[1]) if k[0, j] > 0]
        stage = 0
        for j in sorted(order, key=lambda j: -sc.cluster.buildings[j].gpus):
            for _ in range(int(k[0, j])):
                bld_of_stage[stage] = j
                stage += 1
    eta = eff.eta_net
    nic = hw.nic_gbps * 1e9 / 8 * eta / sc.cluster.intra_oversubscription
    nvl = hw.nvlink_gbps * 1e9 / 8 * eta
    inside_node = plan.tp * plan.cp * plan.dp < hw.gpus_per_node
    priv_bw, priv_lat = (nvl, hw.nvlink_latency_us * 1e-6) if inside_node else (
        nic, hw.nic_latency_us * 1e-6)
    up = r["uplink_min"]
    links: dict[str, Link] = {}

    def link(name: str, bw: float, lat: float) -> Link:
        if name not in links:
            links[name] = Link(name, bw, lat)
        return links[name]

    names = [b.name for b in sc.cluster.buildings]

    def transfer(now: float, src: int, dst: int) -> float:
        """Start a stage-to-stage transfer at ``now``; return its arrival time."""
        a, b = bld_of_stage[src], bld_of_stage[dst]
        if a == b:
            ln = link(f"p2p:{src}->{dst}", priv_bw, priv_lat)
            start, d = ln.reserve(now, float(r["p2p_bytes"]))
            return start + d + ln.latency
        lu = link(f"up:{names[a]}", up, xb.latency_us * 1e-6)
        ld = link(f"down:{names[b]}", up, xb.latency_us * 1e-6)
        nbytes = float(r["x_bytes"])
        start = max(now, lu.free, ld.free)
        d = nbytes / up
        lu.free = ld.free = start + d
        lu.busy += d
        ld.busy += d
        return start + d + lu.latency

    # ---- the event loop
    orders = [schedule_order(i, p, m, v) for i in range(p)]
    nxt = [0] * p
    stage_free = [0.0] * p
    running = [False] * p
    ready: dict[tuple[str, int, int, int], float] = {}
    last_b_start: dict[tuple[int, int], float] = {}
    last_b_end: dict[tuple[int, int], float] = {}
    events: list[tuple[float, int, str, tuple]] = []
    seq = 0

    def push(tm: float, kind: str, data: tuple) -> None:
        nonlocal seq
        heapq.heappush(events, (tm, seq, kind, data))
        seq += 1

    def input_ready(stage: int, op: tuple[str, int, int]) -> float | None:
        kind, mb, ch = op
        if kind == "F" and stage == 0 and ch == 0:
            return 0.0
        if kind == "B" and stage == p - 1 and ch == v - 1:
            return ready.get(("Fdone", mb, ch, stage))
        return ready.get((kind, mb, ch, stage))

    def try_start(stage: int, now: float) -> None:
        if running[stage] or nxt[stage] >= len(orders[stage]):
            return
        op = orders[stage][nxt[stage]]
        t_in = input_ready(stage, op)
        if t_in is None:
            return
        start = max(now, stage_free[stage], t_in)
        if start > now:
            push(start, "wake", (stage,))
            return
        running[stage] = True
        d = dur(op[0], stage, op[2])
        push(now + d, "done", (stage, op, now))

    for i in range(p):
        try_start(i, 0.0)
    n_ops = 0
    while events:
        now, _, kind, data = heapq.heappop(events)
        if kind == "wake":
            try_start(data[0], now)
            continue
        stage, (op_kind, mb, ch), began = data
        running[stage] = False
        stage_free[stage] = now
        nxt[stage] += 1
        n_ops += 1
        if op_kind == "F":
            if stage == p - 1 and ch == v - 1:
                ready[("Fdone", mb, ch, stage)] = now
                try_start(stage, now)
                continue
            dst, dch = (stage + 1, ch) if stage < p - 1 else (0, ch + 1)
            arr = transfer(now, stage, dst)
            ready[("F", mb, dch, dst)] = arr
            push(arr, "wake", (dst,))
        else:
            last_b_start[(stage, ch)] = began
            last_b_end[(stage, ch)] = now
            if not (stage == 0 and ch == 0):
                dst, dch = (stage - 1, ch) if stage > 0 else (p - 1, ch - 1)
                arr = transfer(now, stage, dst)
                ready[("B", mb, dch, dst)] = arr
                push(arr, "wake", (dst,))
        try_start(stage, now)
    pipeline = max(stage_free)

    # ---- gradient sync, chunk by chunk, on a private link and the shared DP uplink
    d_local, d_cross = float(r["dp_local_s"]), float(r["dp_cross_s"])
    releases = []
    for i in range(p):
        for ch in range(v):
            rel = last_b_start[(i, ch)] if plan.overlap_dp else stage_free[i]
            releases.append((rel, i))
    releases.sort()
    dp_free = 0.0
    stage_end = list(stage_free)
    local_free = [0.0] * p
    for rel, i in releases:
        t_loc = max(rel, local_free[i]) + d_local / v
        local_free[i] = t_loc
        if d_cross > 0:
            start = max(t_loc, dp_free)
            dp_free = start + d_cross / v
            t_loc = dp_free
        stage_end[i] = max(stage_end[i], t_loc)
    end = max(stage_end)
    if d_cross > 0:
        links["dp:uplinks"] = Link("dp:uplinks", up, 0.0, busy=p * d_cross)
    opt = float(r["optimizer"])
    res = SimResult(
        iteration_s=end + opt, pipeline_s=pipeline, dp_exposed_s=end - pipeline,
        optimizer_s=opt, ops=n_ops, link_busy_s={k: ln.busy for k, ln in links.items()
                                                 if not k.startswith("p2p")},
        stage_end_s=stage_end)
    log.debug("simulated %d ops: %.4f s", n_ops, res.iteration_s)
    return res
