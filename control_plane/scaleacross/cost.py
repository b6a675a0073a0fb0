"""Analytical per-iteration time, memory and breakdown of parallel plans (vectorized).

Every plan is a row of a :class:`Plans` table of numpy columns, so one call prices a whole
search space. The model, per pipeline stage and microbatch (Narayanan et al. SC'21 notation):

* compute ``τc``: GEMM FLOPs at ``peak · η_max`` (× ``η_fp8`` for FP8 GEMMs), the attention
  core at ``attention_peak · η_max`` (BF16 under Transformer Engine's FP8), plus element-wise
  (memory-bound) work: ``ω`` × the activation bytes a layer keeps (Korthikanti et al. eqs.
  1-6) per pass at HBM bandwidth. Backward = 2 × forward, plus recomputation. A fused
  (flash) attention kernel (``training.fused_attention``) keeps no s × s scores (no score
  bytes), skips the masked half of the causal scores and recomputes them in its backward
  (2.5 × its forward);
* on the critical path per microbatch: TP all-reduces (4 per layer, 6 with full recompute), the
  part of CP KV exchange not hidden by attention, the part of EP all-to-all not hidden by the
  MoE MLP (``overlap_ep``), ZeRO-3 parameter gathers not hidden by compute;
* pipeline: ``m·τ + (p-1)/v·τ'`` (τ' without the logits of the last stage) plus point-to-point:
  a fill/drain latency ``2·Σσ`` over the ``vp-1`` chunk transitions and, in steady state,
  the 1F1B round trip ``2(p-1)σ/p`` per microbatch; never faster than the busiest
  cross-building uplink allows;
* DP gradient sync per stage (flat ring, hierarchical RS/AR/AG, in-network aggregation or THC
  for the cross-building phase): stages finish their last backward ``δ`` apart (stage p-1
  first), their cross-building phases share the uplinks first-come first-served, and with
  ``overlap_dp`` the sync starts during the last backward (bucketed);
* optimizer step bound by HBM bandwidth (30 bytes per fp32 parameter shard);
* gradients of ``training.grad_dtype`` bytes (2 unless stated; DeepSpeed's BF16 optimizer
  reduces its fp32 gradients); with ZeRO >= 1 they are reduce-scattered and the updated
  parameters all-gathered; a DP group with ``k`` ranks per node sends through ``k`` NICs
  (NCCL runs a ring channel per NIC); with ``training.grad_accum_pass`` a memory-bound pass
  after each microbatch's backward adds the half-precision gradients into the main ones.

η_max, ω, the network efficiency η_net and η_fp8 are the constants fitted by
:mod:`control_plane.scaleacross.validate` (η_fp8 on FP8 training rows only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from control_plane.scaleacross import formulas as fm
from control_plane.scaleacross.scenario import Scenario

__all__ = ["COLUMNS", "CROSS_CODES", "RECOMPUTE_CODES", "SYNC_CODES", "Efficiency", "Plans",
           "building_fill", "evaluate", "uplinks_bytes_s"]

GIB = 2.0**30
CROSS_CODES = {"none": 0, "dp": 1, "pp": 2}
SYNC_CODES = {"ring": 0, "hierarchical": 1, "ina": 2, "thc": 3}
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}
COLUMNS = ("tp", "pp", "dp", "ep", "cp", "mb", "v", "rc", "sp", "zero", "cross", "sync",
           "odp", "oep")
#: bytes read+written per parameter of the optimizer shard in an Adam step.
ADAM_BYTES_PER_PARAM = 30.0
#: bytes per element of reduced gradients and gathered parameters.
GRAD_BYTES = 2.0


@dataclass(frozen=True)
class Efficiency:
    """The calibrated global constants (see ``validate``).

    ``eta_max``: achieved fraction of peak of the GEMMs and the attention core; ``omega``:
    bytes of element-wise (memory-bound) traffic per byte of activations a layer keeps
    (Korthikanti et al.'s count), per forward pass, at HBM bandwidth; ``eta_net``: achieved
    fraction of the link bandwidths.
    """

    # fitted by ``netco explore validate`` (see validate.py); a test keeps them in sync
    eta_max: float = 0.70607
    omega: float = 2.4737
    eta_net: float = 0.80573
    eta_fp8: float = 0.66239


Plans = dict[str, np.ndarray]


def uplinks_bytes_s(sc: Scenario) -> np.ndarray:
    """Usable cross-building uplink of each building in bytes/s (per direction)."""
    xb = sc.cluster.cross_building
    out = []
    for b in sc.cluster.buildings:
        cap = b.gpus * sc.hardware.nic_gbps / xb.oversubscription
        link = b.uplink_gbps if b.uplink_gbps is not None else (
            xb.gbps * xb.parallel_links if xb.gbps is not None else np.inf)
        out.append(min(cap, link) * 1e9 / 8)
    return np.asarray(out)


def building_fill(sc: Scenario, units, slice_gpus):
    """Place ``units`` slices of ``slice_gpus`` GPUs, largest building first.

    Returns ``(k, used)``: slices per building (shape plans × buildings, in scenario order) and
    the number of buildings used; ``used`` is 0 where the slices do not fit at all.
    """
    units = np.asarray(units)
    gpus = np.array([b.gpus for b in sc.cluster.buildings])
    order = np.argsort(-gpus, kind="stable")
    k = np.zeros((units.size, gpus.size), dtype=np.int64)
    left = units.astype(np.int64).copy()
    used = np.zeros(units.size, dtype=np.int64)
    for j in order:
        cap = gpus[j] // np.maximum(slice_gpus, 1)
        take = np.minimum(cap, left)
        k[:, j] = take
        used += take > 0
        left -= take
    used = np.where(left > 0, 0, used)
    return k, used


def evaluate(sc: Scenario, P: Plans, eff: Efficiency | None = None) -> dict[str, np.ndarray]:
    """Price every plan in ``P``; returns per-plan arrays (seconds, GiB, booleans).

    Keys: ``iteration_s`` and the breakdown ``compute``, ``bubble``, ``tp_comm``, ``cp_comm``,
    ``ep_comm``, ``pp_comm``, ``dp_comm`` (exposed), ``optimizer``, ``zero3_gather``,
    ``grad_accum`` (they sum to
    ``iteration_s``); ``dp_sync_s`` (whole sync, before overlap), ``memory_gb_per_gpu``,
    ``fits``, ``placeable``, ``buildings_used``, ``ep_crosses``, ``m``.
    """
    eff = eff or Efficiency()
    md, hw, cl = sc.model, sc.hardware, sc.cluster
    xb = cl.cross_building
    t = P["tp"].astype(float)
    p = P["pp"].astype(float)
    d = P["dp"].astype(float)
    e = P["ep"].astype(float)
    c = P["cp"].astype(float)
    b = P["mb"].astype(float)
    v = P["v"].astype(float)
    rc, sp, zero = P["rc"], P["sp"].astype(bool), P["zero"]
    cross, sync = P["cross"], P["sync"]
    odp, oep = P["odp"].astype(bool), P["oep"].astype(bool)
    n = t.size
    B, s, h, L = sc.global_batch, md.seq, md.hidden, md.layers
    by = float(sc.wire_bytes)  # activations on the wire
    m = B / (b * d)
    gpn = hw.gpus_per_node

    # ---- bandwidths (bytes/s) and latencies (s)
    nv_bw = hw.nvlink_gbps * 1e9 / 8 * eff.eta_net
    nic_bw = hw.nic_gbps * 1e9 / 8 * eff.eta_net / cl.intra_oversubscription
    a_nv, a_nic, a_x = hw.nvlink_latency_us * 1e-6, hw.nic_latency_us * 1e-6, xb.latency_us * 1e-6

    def group_bw(span):
        """Bandwidth/latency of a group of ranks spread over ``span`` consecutive GPUs."""
        inside = span <= gpn
        return np.where(inside, nv_bw, nic_bw), np.where(inside, a_nv, a_nic)

    # ---- placement over buildings
    world = t * p * d * c
    slice_gpus = np.where(cross == CROSS_CODES["pp"], t * c * d, t * c * p)
    units = np.where(cross == CROSS_CODES["pp"], p, d)
    single = world <= max(bd.gpus for bd in cl.buildings)
    k, used = building_fill(sc, np.where(cross == 0, 1, units),
                            np.where(cross == 0, world, slice_gpus).astype(np.int64))
    placeable = np.where(cross == 0, single, used >= 2)
    G = np.where(cross == 0, 1, np.maximum(used, 1)).astype(float)
    up = uplinks_bytes_s(sc) * eff.eta_net
    up_min = np.min(np.where(k > 0, up[None, :], np.inf), axis=1)
    up_min = np.where(np.isfinite(up_min), up_min, np.inf)
    kmax = np.max(k, axis=1).astype(float)
    dp_cross = (cross == CROSS_CODES["dp"]) & (G > 1)
    pp_cross = (cross == CROSS_CODES["pp"]) & (G > 1)
    ep_split = np.any((k > 0) & (k % np.maximum(P["ep"], 1)[:, None] != 0), axis=1)
    ep_crosses = dp_cross & (e > 1) & ep_split

    # ---- compute per microbatch per stage (last stage, which also holds the logits)
    tokens = b * s
    emb = bool(sc.parallel.embedding_stage)
    Ls = sc.stage_units / p  # transformer layers of a middle stage
    moe_frac = (md.moe_layers / L) if md.is_moe else 0.0
    fd = fm.layer_flops_fwd(md, 1.0, moe=False)
    fmoe = fm.layer_flops_fwd(md, 1.0, moe=True) if md.is_moe else fd
    gemm_f = tokens * Ls * ((1 - moe_frac) * (fd["attn_gemm"] + fd["mlp"])
                            + moe_frac * (fmoe["attn_gemm"] + fmoe["mlp"]))
    core_f = tokens * Ls * fd["core_attn"]
    logit_f = fm.logit_flops_fwd(md, tokens)
    # GEMMs at the dtype's peak; the attention core (scores, softmax·V) at
    # ``attention_peak_tflops`` (Transformer Engine's FP8 covers the GEMMs of its linear
    # layers, the attention runs in BF16); both at the fitted fraction ``eta_max``
    fp8 = eff.eta_fp8 if sc.dtype == "fp8" else 1.0
    gemm_rate = hw.peak_tflops * 1e12 * eff.eta_max * fp8 * t * c
    fused = bool(sc.fused_attention)
    attn_rate = hw.attention_peak * 1e12 * eff.eta_max * t * c
    # a fused (flash) attention kernel skips the masked half of the causal score matrix and
    # recomputes the scores in its backward; the FlashAttention repository counts its work as
    # "f = 4 * batch * seqlen**2 * nheads * headdim // (2 if causal else 1)" forward and
    # "2.5 * f" backward (benchmarks/benchmark_flash_attention.py)
    core_fwd = core_f * (0.5 if fused else 1.0) / attn_rate
    core_bwd = core_fwd * (2.5 if fused else 2.0)
    # element-wise (memory-bound) work: ``omega`` times the bytes of activations a layer
    # keeps (Korthikanti et al. eqs. 1-6, no recompute; an MoE layer's MLP share scaled by
    # top_k x capacity as in the memory model below) per pass at HBM speed; a fused attention
    # kernel keeps no s x s scores ("memory linear in sequence length"), so no score bytes
    hbm = hw.hbm_gb_s * 1e9
    moe_scale = md.top_k * md.capacity_factor if md.is_moe else 1.0

    def _acts(code: int):
        return ((1 - moe_frac) * fm.activation_bytes_per_layer(s / c, b, h, md.heads, t, sp, code)
                + moe_frac * fm.activation_bytes_per_layer(s / c, b, h, md.heads, t, sp, code,
                                                           moe_scale))

    a_lin = _acts(1)  # selective form: everything but the attention scores
    a_core = 0.0 if fused else _acts(0) - a_lin
    el_lin = Ls * eff.omega * a_lin / hbm
    el_core = Ls * eff.omega * a_core / hbm
    gemm_fwd = gemm_f / gemm_rate
    fwd_layers = gemm_fwd + core_fwd + el_lin + el_core
    bwd_layers = 2 * gemm_fwd + core_bwd + 2 * (el_lin + el_core)
    rec = np.select([rc == 2, rc == 1], [fwd_layers, core_fwd + el_core], 0.0)
    logit_t = logit_f / gemm_rate
    if emb:
        # the last stage holds one layer fewer than the others (``embedding_stage``): the
        # period is the slower of a middle stage (Ls layers) and the last (Ls - 1 layers and
        # the logits); the logits' share is what the last stage adds beyond a middle one
        one_layer = (fwd_layers + bwd_layers + rec) / Ls
        logit_t = np.where(p > 1, np.maximum(0.0, 3 * logit_t - one_layer) / 3, logit_t)
    tau_c = fwd_layers + bwd_layers + rec + 3 * logit_t
    moe_mlp_time = 3 * tokens * Ls * moe_frac * fmoe["mlp"] / gemm_rate
    core_time = core_fwd + core_bwd

    # ---- TP: 4 all-reduces (or RS+AG with SP) per layer per microbatch, 6 with full recompute
    tp_msg = b * (s / c) * h * by
    tbw, tal = group_bw(t)
    n_ar = np.where(rc == 2, 6.0, 4.0)
    tp_mb = Ls * n_ar * fm.allreduce_time(tp_msg, t, tbw, tal)
    if sc.tp_comm_overlap:
        # ``training.tp_comm_overlap`` (Transformer Engine's userbuffers): each TP all-gather /
        # reduce-scatter is split into chunks that overlap the GEMM it feeds or drains; only
        # what the layers' GEMMs (forward, backward, recomputed forward) cannot hide is exposed
        tp_mb = np.maximum(0.0, tp_mb - gemm_fwd * np.where(rc == 2, 4.0, 3.0))

    # ---- CP: K,V gathered forward, gathered + dK,dV reduce-scattered backward
    kv = h * md.kv / md.heads
    cp_bytes = 2 * b * (s / c) * kv * by / t
    cbw, cal = group_bw(t * c)
    cp_raw = Ls * 3 * (c - 1) * (cp_bytes / cbw + cal)
    cp_mb = np.maximum(0.0, cp_raw - core_time)

    # ---- EP all-to-all: 4 per MoE layer per microbatch (6 with full recompute)
    if md.is_moe:
        a2a_bytes = b * (s / c) * md.top_k * md.capacity_factor * h * by / t
        ebw, eal = group_bw(t * c * e)
        n_a2a = np.where(rc == 2, 6.0, 4.0) * Ls * moe_frac
        local = fm.alltoall_time(a2a_bytes, e, ebw, eal)
        # crossing EP groups: half of each group's traffic leaves the building, all ranks of a
        # building at once over its uplink
        per_bld = np.where(cross == 1, kmax * t * c * p, 1.0)
        xtime = 0.5 * a2a_bytes * per_bld / up_min + a_x
        a2a = np.where(ep_crosses, np.maximum(local, xtime), local)
        ep_raw = n_a2a * a2a
        ep_mb = np.where(oep, np.maximum(0.0, ep_raw - moe_mlp_time), ep_raw)
    else:
        ep_raw = ep_mb = np.zeros(n)

    # ---- parameters and gradient bytes per GPU (first stage: layers + embedding)
    pr = fm.model_params(md)
    layer_dense = (pr["dense"] - (md.vocab + s) * h) / L
    layer_exp = pr["expert"] / L
    psi_dense = (Ls * layer_dense + (md.vocab + s) * h) / t
    if emb:  # the busiest stage: a middle one, or the first (Ls - 1 layers and the embedding)
        psi_dense = np.where(p > 1, np.maximum(Ls, Ls - 1 + (md.vocab + s) * h / layer_dense)
                             * layer_dense / t, psi_dense)
    psi_exp = Ls * layer_exp / (t * e)
    gb = float(sc.grad_bytes)  # bytes per accumulated/reduced gradient element
    n_dp = d * c
    n_edp = np.maximum(n_dp / e, 1.0)

    def dp_bw(span, n):
        """Bandwidth/latency of a DP group of ``n`` ranks spread over ``span`` GPUs.

        Ranks are ordered TP fastest, then CP, then DP (Megatron's order), so a DP group whose
        stride ``t·c`` is below a node holds ``k = gpn/(t·c)`` ranks in each node. NCCL runs
        one ring channel per NIC, so the group's inter-node traffic leaves each node through
        all ``k`` NICs: per rank ``k`` times one NIC, at most NVLink.
        """
        bw, al = group_bw(span)
        k = np.clip(gpn / np.maximum(span / np.maximum(n, 1), 1.0), 1.0, np.maximum(n, 1))
        return np.where(span <= gpn, bw, np.minimum(nv_bw, k * bw)), al

    # ---- ZeRO-3 parameter gathers per microbatch (forward + backward), hidden by compute
    dbw, dal = dp_bw(t * c * d, n_dp)
    # two all-gathers of the stage's parameters move as much as one all-reduce
    z3_raw = np.where(zero == 3, fm.allreduce_time(psi_dense * GRAD_BYTES, n_dp, dbw, dal), 0.0)
    # across buildings each building fetches the other buildings' shards of the whole stage
    # (t ranks), forward and backward, while all p stages gather at once over the uplinks
    z3_x = 2 * (G - 1) / G * t * psi_dense * GRAD_BYTES * p / up_min + 2 * a_x
    z3_raw = np.where((zero == 3) & dp_cross, np.maximum(z3_raw, z3_x), z3_raw)
    z3_mb = np.maximum(0.0, z3_raw - tau_c)

    # ---- gradient accumulation outside the GEMMs (``grad_accum_pass``): after each
    # microbatch's backward the stage's 2-byte gradients are added into the g-byte main ones,
    # as DeepSpeed's BF16 optimizer does (``update_hp_grads``:
    # ``hp_grad.add_(lp.grad.to(hp_grad.dtype))``): read the 2-byte gradient, write and read
    # its g-byte copy (only when g != 2: ``.to`` makes one), read and write the main gradient
    # -- 2 + 4g bytes per parameter for fp32 main gradients, 6 for 2-byte ones, at HBM speed
    accum_mb = np.zeros(n)
    if sc.grad_accum_pass:
        per_param = GRAD_BYTES + 2 * gb + (2 * gb if gb != GRAD_BYTES else 0.0)
        accum_mb = (psi_dense + psi_exp) * per_param / (hw.hbm_gb_s * 1e9)
    tau = tau_c + tp_mb + cp_mb + ep_mb + z3_mb + accum_mb

    # ---- pipeline point-to-point
    p2p_msg = b * (s / c) * h * by / t
    sig_in = np.where(t * c * d < gpn, a_nv + p2p_msg / nv_bw, a_nic + p2p_msg / nic_bw)
    x_bytes = t * c * d * p2p_msg
    sig_x = a_x + x_bytes / up_min
    n_xb = np.where(pp_cross, G - 1, 0.0)
    wrap_x = pp_cross & (v > 1)
    sig_sum = np.where(
        p > 1,
        v * ((p - 1 - n_xb) * sig_in + n_xb * sig_x) + (v - 1) * np.where(wrap_x, sig_x, sig_in),
        0.0)
    sig_mean = np.where(p > 1, sig_sum / np.maximum(v * p - 1, 1), 0.0)
    # the last stage (logits) sets the steady-state period; fill and drain run through the
    # other stages
    tau_other = tau - 3 * logit_t
    ideal = m * tau + (p - 1) / v * tau_other
    latency = 2 * sig_sum + np.maximum(m - p, 0) * 2 * (p - 1) * sig_mean / p
    if sc.blocking_p2p:
        # DeepSpeed's pipeline engine (``training.blocking_p2p``): every send is "blocking
        # and must be paired with a RecvActivation on the next pipeline stage"
        # (runtime/pipe/schedule.py), so transfers sit on the critical path in lockstep.
        # Simulating its TrainSchedule step by step with rendezvous transfers of σ each (any
        # forward/backward ratio) puts 4m + 2p - 8 of them on the critical path for p >= 3,
        # 2m for p = 2 (Megatron's 1F1B: about 2 per microbatch)
        n_blk = np.where(p >= 3, 4 * m + 2 * p - 8, np.where(p == 2, 2 * m, 0.0))
        latency = np.maximum(latency, n_blk * sig_mean)
    # busiest uplink: 2v transfers per microbatch leave a boundary building
    busy = np.where(pp_cross, 2 * v * x_bytes / up_min, 0.0)
    t_pipe = np.maximum(ideal + latency, m * busy + (p - 1) / v * tau_other + 2 * sig_sum)
    pp_comm = t_pipe - ideal

    # ---- DP gradient sync of one stage (dense params over n_dp, experts over n_edp)
    # all-reduce-equivalent bytes of the sync: gradients all-reduced (``zero = 0``), or
    # reduce-scattered and the updated parameter shards all-gathered (ZeRO >= 1: Megatron's
    # distributed optimizer, DeepSpeed ZeRO): (n-1)/n·(g + w) = an all-reduce of (g + w)/2
    # bytes; with ``zero_grad_allreduce`` (DeepSpeed's BF16 optimizer) a full all-reduce of
    # the gradients, then the parameter all-gather: an all-reduce of g + w/2 bytes
    zero_b = gb + GRAD_BYTES / 2 if sc.zero_grad_allreduce else (gb + GRAD_BYTES) / 2
    sync_b = np.where(zero >= 1, zero_b, gb)
    g_dense = psi_dense * sync_b
    g_exp = psi_exp * sync_b
    gbw, gal = dp_bw(t * c * d, n_dp)
    # (a dense model has no expert gradients: no second all-reduce, not even its latency)
    local_dp = fm.allreduce_time(g_dense, n_dp, gbw, gal) + np.where(g_exp > 0, fm.allreduce_time(
        g_exp, n_edp, dp_bw(t * c * d / np.maximum(e, 1), n_edp)[0], gal), 0.0)
    # cross-building variants. Expert replicas sit in every building's DP block, so the
    # expert gradients (all e shards of the stage) cross like the dense ones.
    bus_d, bus_e = fm.bus_factor("allreduce", n_dp), fm.bus_factor("allreduce", n_edp)
    ring_x = np.maximum((bus_d * g_dense + bus_e * g_exp) / gbw,
                        t * (bus_d * g_dense + e * bus_e * g_exp) / up_min)
    ring_lat = 2 * (n_dp - 1) * a_x
    n_loc = np.maximum(kmax * c, 1.0)
    n_eloc = np.maximum(n_loc / e, 1.0)
    loc_bw, loc_al = dp_bw(t * c * kmax, n_loc)  # the DP ranks inside one building
    hier_local = 2 * (fm.bus_factor("reducescatter", n_loc) * g_dense / loc_bw
                      + (n_loc - 1) * loc_al)
    hier_local += 2 * (fm.bus_factor("reducescatter", n_eloc) * g_exp / loc_bw
                       + (n_eloc - 1) * loc_al)
    full_stage = t * (g_dense + e * g_exp)  # one stage's gradient bytes, whole replica
    coords = (g_dense + g_exp) / sync_b
    x_phase = np.select(
        [sync == 1, sync == 2, sync == 3],
        [fm.bus_factor("allreduce", G) * full_stage / up_min + 2 * (G - 1) * a_x,
         full_stage / up_min + 2 * a_x,
         0.5 * full_stage / up_min + 2 * a_x + 5.5 * coords / (hw.hbm_gb_s * 1e9)],
        ring_x + ring_lat)
    x_local = np.where(sync == 0, 0.0, hier_local)
    d_local = np.where(dp_cross, x_local, local_dp)
    d_x = np.where(dp_cross, x_phase, 0.0)
    dp_total = d_local + d_x
    # backward share of the per-microbatch collectives: 2 of 4 (2 forward, 2 backward), or 4 of
    # 6 with full recompute (the recomputed forward repeats its collectives)
    bwd_share = (n_ar - 2) / n_ar
    tau_b = (bwd_layers + 2 * logit_t + rec) + (tau - tau_c) * bwd_share
    delta = tau_b / v + sig_mean
    w = np.where(odp, tau_b / v, 0.0)
    # with overlap and v chunks, chunk j's gradients are ready ~j·p backward chunks before the
    # end: the tail left after the last chunk is max(D/v, D - (v-1)·Δ) of a sync of length D
    gap = np.minimum(p, m) * tau_b / v
    tail = np.where(odp & (v > 1), np.maximum(1 / v, 1 - (v - 1) * gap / np.maximum(
        d_local + d_x, 1e-30)), 1.0)
    d_local_raw, d_x_raw = d_local, d_x
    d_local, d_x = d_local * tail, d_x * tail
    # stages release δ apart; shared uplink serves equal demands first-come first-served
    kstar = np.where(d_x > delta, p - 1, 0.0)
    finish = d_local + (kstar + 1) * d_x - kstar * delta - w
    # the shared uplink cannot finish all p stages' work before it gets it: it starts at the
    # first release at the earliest
    spread = np.where(odp & (v > 1), (v - 1) * gap, 0.0)
    finish = np.maximum(finish, p * d_x_raw - (p - 1) * delta - spread - w)
    dp_exposed = np.maximum(0.0, np.where(dp_cross, finish, d_local - w))

    # ---- optimizer step (HBM bound on the optimizer shard)
    shard = np.where(zero >= 1, psi_dense / n_dp + psi_exp / n_edp, psi_dense + psi_exp)
    opt = shard * ADAM_BYTES_PER_PARAM / (hw.hbm_gb_s * 1e9)

    iteration = t_pipe + dp_exposed + opt
    compute = m * tau_c
    bubble = (p - 1) / v * tau_other

    # ---- memory per GPU
    states = fm.model_state_bytes(psi_dense, n_dp, zero) + fm.model_state_bytes(psi_exp, n_edp, zero)
    moe_scale = md.top_k * md.capacity_factor if md.is_moe else 1.0
    act_layer = ((1 - moe_frac) * fm.activation_bytes_per_layer(s / c, b, h, md.heads, t, sp, rc)
                 + moe_frac * fm.activation_bytes_per_layer(s / c, b, h, md.heads, t, sp, rc,
                                                           moe_scale))
    inflight = np.minimum(p, m) * np.where(v > 1, 1 + (p - 1) / (p * v), 1.0)
    acts = act_layer * Ls * inflight
    logits = 4.0 * b * (s / c) * md.vocab / t
    mem = (states + acts + logits) / GIB + hw.memory_reserved_gb
    fits = mem <= hw.memory_gb

    return {
        "iteration_s": iteration,
        "compute": compute,
        "bubble": bubble,
        "tp_comm": m * tp_mb,
        "cp_comm": m * cp_mb,
        "ep_comm": m * ep_mb,
        "zero3_gather": m * z3_mb,
        "grad_accum": m * accum_mb,
        "pp_comm": pp_comm,
        "dp_comm": dp_exposed,
        "optimizer": opt,
        "dp_sync_s": dp_total,
        "memory_gb_per_gpu": mem,
        "fits": fits,
        "placeable": placeable,
        "buildings_used": G.astype(int),
        "ep_crosses": ep_crosses,
        "m": m,
        "tau_s": tau,
        "sigma_in_s": sig_in,
        "sigma_x_s": sig_x,
        "world": world,
        "fwd_mb": fwd_layers,
        "bwd_mb": bwd_layers,
        "logit_mb": logit_t,
        "rec_mb": rec,
        "comm_mb": tp_mb + cp_mb + ep_mb + z3_mb,
        "accum_mb": accum_mb,
        "comm_bwd_share": bwd_share,
        "p2p_bytes": p2p_msg,
        "x_bytes": x_bytes,
        "uplink_min": up_min,
        "dp_local_s": d_local_raw,
        "dp_cross_s": d_x_raw,
        "slices": k,
    }


BREAKDOWN_KEYS = ("compute", "bubble", "tp_comm", "cp_comm", "ep_comm", "zero3_gather",
                  "grad_accum", "pp_comm", "dp_comm", "optimizer")

#: How the breakdown's parts are named in tables and plot legends (the JSON keeps the keys).
BREAKDOWN_LABELS = {"compute": "compute", "bubble": "pipeline bubble",
                    "tp_comm": "tensor-parallel comm.", "cp_comm": "context-parallel comm.",
                    "ep_comm": "expert-parallel comm.", "zero3_gather": "ZeRO-3 gather",
                    "grad_accum": "gradient accumulation",
                    "pp_comm": "pipeline comm.", "dp_comm": "data-parallel sync",
                    "optimizer": "optimizer step"}
#: Parts shorter than this (seconds) in every row are left out of the tables and plots.
BREAKDOWN_SHOWN_S = 5e-4
