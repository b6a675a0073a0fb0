"""Analytical model: hand-checked compute, memory rejection, network-technique ordering."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from control_plane.scaleacross import formulas as fm
from control_plane.scaleacross.cost import Efficiency, evaluate
from control_plane.scaleacross.plan import Plan, resolve_plan
from tests.support.scaleacross import scenario

EFF = Efficiency(eta_max=0.5, omega=2.0, eta_net=0.8)


def one(sc, pl, eff=EFF):
    return {k: np.asarray(v)[0] for k, v in evaluate(sc, pl.to_arrays(), eff).items()}


def _elementwise_s(sc, b=1, core=True):
    """By hand: omega x Korthikanti's activation bytes of every layer, 3 passes, at HBM speed."""
    md, hw = sc.model, sc.hardware
    s, h, a = md.seq, md.hidden, md.heads
    per_layer = s * b * h * (34 + (5 * a * s / h if core else 0.0))  # eq. 1, t = 1, 2-byte
    return 3 * md.layers * EFF.omega * per_layer / (hw.hbm_gb_s * 1e9)


def test_single_gpu_time_is_flops_over_peak_plus_elementwise_bytes():
    sc = scenario(training={"global_batch": 8})
    pl = Plan(tp=1, pp=1, dp=1, microbatch=1, recompute="none", zero=0)
    r = one(sc, pl)
    flops = fm.flops_per_iteration(sc.model, 8, "none")
    expect = flops / (sc.hardware.peak_tflops * 1e12 * EFF.eta_max) + 8 * _elementwise_s(sc)
    assert r["iteration_s"] - r["optimizer"] == pytest.approx(expect, rel=1e-9)
    assert r["compute"] == pytest.approx(expect, rel=1e-9)
    assert r["bubble"] == 0 and r["dp_comm"] == 0 and r["tp_comm"] == 0


def test_a_faster_peak_leaves_the_elementwise_time():
    # twice the peak at the same HBM bandwidth halves the FLOP time, not the element-wise one
    sc = scenario(training={"global_batch": 8})
    fast = replace(sc, hardware=replace(sc.hardware, peak_tflops=2 * sc.hardware.peak_tflops))
    pl = Plan(tp=1, pp=1, dp=1, microbatch=1, recompute="none", zero=0)
    t1, t2 = one(sc, pl)["compute"], one(fast, pl)["compute"]
    el = 8 * _elementwise_s(sc)
    assert t2 == pytest.approx((t1 - el) / 2 + el, rel=1e-9)
    assert t1 / 2 < t2 < t1


def test_fused_attention_by_hand():
    # a fused (flash) kernel: no s x s score bytes, half the causal scores, backward 2.5 x its
    # forward -- 3 x core + score bytes unfused against 0.5 x (1 + 2.5) x core fused
    sc = scenario(training={"global_batch": 8})
    fused = replace(sc, fused_attention=True)
    pl = Plan(tp=1, pp=1, dp=1, microbatch=1, recompute="none", zero=0)
    t_unf, t_fus = one(sc, pl)["compute"], one(fused, pl)["compute"]
    md = sc.model
    core = 8 * md.layers * fm.layer_flops_fwd(md, md.seq)["core_attn"] / (
        sc.hardware.peak_tflops * 1e12 * EFF.eta_max)
    scores = 8 * (_elementwise_s(sc) - _elementwise_s(sc, core=False))
    assert t_unf - t_fus == pytest.approx(3 * core - 1.75 * core + scores, rel=1e-9)


def test_fp8_gemms_and_attention_at_their_own_peaks():
    # GEMMs at peak x eta_max x eta_fp8, the attention core at attention_peak_tflops x eta_max
    sc = replace(scenario(training={"global_batch": 8}), dtype="fp8", fused_attention=True)
    hw = sc.hardware
    pl = Plan(tp=1, pp=1, dp=1, microbatch=1, recompute="none", zero=0)
    eff = replace(EFF, eta_fp8=0.5)
    base = one(sc, pl, eff)["compute"]
    slow_attn = one(replace(sc, hardware=replace(hw, attention_peak_tflops=hw.peak_tflops / 2)),
                    pl, eff)["compute"]
    md = sc.model
    core = 8 * md.layers * 0.5 * 3.5 * fm.layer_flops_fwd(md, md.seq)["core_attn"] / (
        hw.peak_tflops * 1e12 * EFF.eta_max)
    assert slow_attn - base == pytest.approx(core, rel=1e-9)
    gemm = fm.flops_per_iteration(md, 8, "none") - 8 * md.layers * 3 * fm.layer_flops_fwd(
        md, md.seq)["core_attn"]
    faster = one(sc, pl, replace(eff, eta_fp8=1.0))["compute"]
    assert base - faster == pytest.approx(gemm / (hw.peak_tflops * 1e12 * EFF.eta_max),
                                          rel=1e-9)
    # a 2-byte run does not see eta_fp8
    bf16 = replace(sc, dtype="bf16")
    assert one(bf16, pl, eff)["compute"] == pytest.approx(one(bf16, pl, EFF)["compute"])


def test_tp_comm_overlap_hides_what_the_gemms_cover():
    sc = scenario(training={"global_batch": 64})
    pl = Plan(tp=8, pp=1, dp=1, microbatch=1, recompute="none", zero=0,
              sequence_parallel=True)
    plain = one(sc, pl)
    assert plain["tp_comm"] > 0
    hidden = one(replace(sc, tp_comm_overlap=True), pl)
    # the GEMMs of a layer (3 x forward) outlast its TP collectives on NVLink: all hidden
    assert hidden["tp_comm"] == 0
    assert hidden["iteration_s"] == pytest.approx(plain["iteration_s"] - plain["tp_comm"],
                                                  rel=1e-9)
    # on a slow link only the part beyond the GEMMs stays exposed
    slow = replace(sc, hardware=replace(sc.hardware, nvlink_gbps=1.0))
    raw, ovl = one(slow, pl)["tp_comm"], one(replace(slow, tp_comm_overlap=True), pl)["tp_comm"]
    md = sc.model
    gemm = 64 * md.layers * 3 * (fm.layer_flops_fwd(md, md.seq)["attn_gemm"]
                                 + fm.layer_flops_fwd(md, md.seq)["mlp"]) / (
        8 * sc.hardware.peak_tflops * 1e12 * EFF.eta_max)
    assert ovl == pytest.approx(raw - gemm, rel=1e-9)


def test_blocking_p2p_puts_the_transfers_on_the_critical_path():
    # DeepSpeed's TrainSchedule with rendezvous transfers: 4m + 2p - 8 transfers of sigma on
    # the critical path (p >= 3), against Megatron's fill/drain plus ~2 per microbatch
    sc = scenario(model={"vocab": 8}, training={"global_batch": 64})
    pl = Plan(tp=1, pp=4, dp=1, microbatch=1, recompute="none", zero=0)
    meg = one(sc, pl)
    ds = one(replace(sc, blocking_p2p=True), pl)
    sig = float(meg["sigma_in_s"])
    m, p = 64, 4
    assert meg["pp_comm"] == pytest.approx(2 * (p - 1) * sig + (m - p) * 2 * (p - 1) / p * sig,
                                           rel=1e-9)
    assert ds["pp_comm"] == pytest.approx((4 * m + 2 * p - 8) * sig, rel=1e-9)
    assert ds["compute"] == meg["compute"] and ds["bubble"] == meg["bubble"]


def test_fp8_sends_two_byte_activations():
    sc = scenario(training={"global_batch": 64})
    pl = Plan(tp=8, pp=2, dp=1, microbatch=1, recompute="none", zero=0)
    fp8, bf16 = replace(sc, dtype="fp8"), replace(sc, dtype="bf16")
    assert fp8.wire_bytes == bf16.wire_bytes == 2 and fp8.dtype_bytes == 1
    assert one(fp8, pl)["tp_comm"] == pytest.approx(one(bf16, pl)["tp_comm"], rel=1e-12)
    assert one(fp8, pl)["p2p_bytes"] == one(bf16, pl)["p2p_bytes"]


def test_breakdown_sums_to_iteration_time():
    sc = scenario(parallel={"tp": 4, "pp": 4, "interleave": 2, "cross": "pp"})
    r = one(sc, resolve_plan(sc, EFF))
    parts = ("compute", "bubble", "tp_comm", "cp_comm", "ep_comm", "zero3_gather", "pp_comm",
             "dp_comm", "optimizer")
    assert sum(r[k] for k in parts) == pytest.approx(r["iteration_s"], rel=1e-9)
    assert r["pp_comm"] > 0 and r["bubble"] > 0 and r["tp_comm"] > 0


def test_pipeline_bubble_follows_the_formula():
    sc = scenario(model={"vocab": 8}, training={"global_batch": 64})
    base = Plan(tp=1, pp=4, dp=1, microbatch=1, recompute="none", zero=0)
    for v in (1, 2):
        r = one(sc, replace(base, interleave=v))
        assert r["bubble"] / r["compute"] == pytest.approx(
            float(fm.bubble_fraction(4, 64, v)), rel=1e-3)


def test_memory_rejects_a_plan_that_cannot_fit():
    sc = scenario(model={"layers": 48, "hidden": 8192, "heads": 64})  # ~39B parameters
    big = one(sc, Plan(tp=1, pp=1, dp=8, zero=0, recompute="none"))
    assert not big["fits"] and big["memory_gb_per_gpu"] > 80 * 5
    ok = one(sc, Plan(tp=8, pp=4, dp=4, zero=1, recompute="selective", sequence_parallel=True,
                      cross="dp", dp_sync="hierarchical"))
    assert ok["fits"] and ok["memory_gb_per_gpu"] < 80
    # model states alone by hand: 39B/(8*4) params per GPU, ZeRO-1 over 4
    psi = (fm.model_params(sc.model)["total"] - (32000 + 2048) * 8192) / 4 / 8 \
        + (32000 + 2048) * 8192 / 8
    assert ok["memory_gb_per_gpu"] > (4 * psi + 12 * psi / 4) / 2**30


def test_cross_building_phase_ordering_for_four_buildings():
    sc = scenario(cluster={"buildings": [{"gpus": 32}] * 4,
                           "cross_building": {"oversubscription": 8, "latency_us": 500,
                                              "ina": True, "thc": True}})
    base = Plan(tp=8, pp=1, dp=16, zero=1, cross="dp", sequence_parallel=True)
    x = {s: one(sc, replace(base, dp_sync=s))["dp_cross_s"]
         for s in ("ring", "hierarchical", "ina", "thc")}
    assert x["thc"] < x["ina"] < x["hierarchical"] < x["ring"]
    # hierarchical inter-building phase: 2(G-1)/G * S / BW_x + 2(G-1) alpha_x
    bw = 32 * 200e9 / 8 / 8 * EFF.eta_net  # building uplink: 32 GPUs x 200 Gb/s / 8
    stage_bytes = 8 * _grad_bytes_per_gpu(sc, base)  # all 8 TP shards of the replica
    assert x["hierarchical"] == pytest.approx(1.5 * stage_bytes / bw + 6 * 500e-6, rel=1e-6)
    # THC: 4-bit up, 8-bit down of 16-bit gradients -> the 8-bit download dominates; plus one
    # HBM pass to encode/decode (5.5 bytes per coordinate at 2000 GB/s)
    coords = _grad_bytes_per_gpu(sc, base) / 2
    assert x["thc"] == pytest.approx(0.5 * stage_bytes / bw + 2 * 500e-6 + 5.5 * coords / 2e12,
                                     rel=1e-6)


def _grad_bytes_per_gpu(sc, pl):
    pr = fm.model_params(sc.model)
    emb = (sc.model.vocab + sc.model.seq) * sc.model.hidden
    return ((pr["dense"] - emb) / pl.pp + emb) / pl.tp * 2


def test_slower_cross_building_link_never_speeds_a_plan_up():
    times = []
    for over, lat in ((1, 50), (4, 500), (8, 2000)):
        sc = scenario(cluster={"cross_building": {"oversubscription": over, "latency_us": lat}})
        times.append(one(sc, Plan(tp=8, pp=1, dp=16, cross="dp", dp_sync="ring",
                                  sequence_parallel=True))["iteration_s"])
    assert times[0] < times[1] < times[2]


# ---- issue 34: the data-parallel sync, the gradient-accumulation pass, the embedding stage

def _dp(sc, pl):
    return one(sc, pl)["dp_sync_s"]


def test_dp_group_with_k_ranks_per_node_sends_through_k_nics():
    # 64 GPUs, 8 per node. tp 1: a DP group of 64 has 8 ranks in each node; tp 8: one. With the
    # same gradient bytes per GPU the tp-1 group's ring runs on 8 NICs per node: 8x faster
    # (the α terms aside), capped by NVLink (2400 Gb/s = 12 x 200 Gb/s, not reached here).
    sc = scenario(model={"vocab": 8}, cluster={"buildings": [{"gpus": 64}]},
                  training={"global_batch": 64})
    one_nic = _dp(sc, Plan(tp=8, pp=1, dp=8, zero=0))
    eight = _dp(sc, Plan(tp=1, pp=1, dp=64, zero=0))
    g8 = _grad_bytes_per_gpu(sc, Plan(tp=8, pp=1, dp=8))
    g1 = _grad_bytes_per_gpu(sc, Plan(tp=1, pp=1, dp=64))
    nic = 200e9 / 8 * EFF.eta_net
    assert one_nic == pytest.approx(2 * 7 / 8 * g8 / nic + 2 * 7 * 8e-6, rel=1e-6)
    assert eight == pytest.approx(2 * 63 / 64 * g1 / (8 * nic) + 2 * 63 * 8e-6, rel=1e-6)


def test_gradient_dtype_and_zero_change_the_sync_bytes():
    base = dict(model={"vocab": 8}, cluster={"buildings": [{"gpus": 64}]},
                training={"global_batch": 64})
    pl = Plan(tp=8, pp=1, dp=8, zero=0)
    half = scenario(**base)
    fp32 = scenario(**{**base, "training": {"global_batch": 64, "grad_dtype": "fp32"}})
    lat = 2 * 7 * 8e-6
    t2, t4 = _dp(half, pl) - lat, _dp(fp32, pl) - lat
    assert t4 == pytest.approx(2 * t2, rel=1e-9)  # fp32 gradients: twice the bytes
    # ZeRO-1: reduce-scatter of the gradients + all-gather of 2-byte parameters; with 2-byte
    # gradients that is the all-reduce again, with fp32 ones (4 + 2) / 2 = 3 of 4 bytes
    z1 = replace(pl, zero=1)
    assert _dp(half, z1) - lat == pytest.approx(t2, rel=1e-9)
    assert _dp(fp32, z1) - lat == pytest.approx(0.75 * t4, rel=1e-9)
    # DeepSpeed's BF16 optimizer all-reduces the fp32 gradients in full, then all-gathers the
    # bf16 parameters: 4 + 2/2 = 5 "all-reduce bytes" per parameter
    ds = scenario(**{**base, "training": {"global_batch": 64, "grad_dtype": "fp32",
                                          "zero_grad_allreduce": True}})
    assert _dp(ds, z1) - lat == pytest.approx(1.25 * t4, rel=1e-9)


def test_grad_accum_pass_costs_one_hbm_pass_per_microbatch():
    base = dict(model={"vocab": 8}, cluster={"buildings": [{"gpus": 8}]},
                training={"global_batch": 16, "grad_dtype": "fp32"})
    pl = Plan(tp=8, pp=1, dp=1, zero=0, microbatch=1, recompute="full")
    off = one(scenario(**base), pl)
    on = one(scenario(**{**base, "training": {**base["training"], "grad_accum_pass": True}}), pl)
    psi = _grad_bytes_per_gpu(scenario(**base), pl) / 2  # parameters per GPU
    sc = scenario(**base)
    # hp_grad.add_(lp.grad.to(fp32)): read bf16 2, write + read the fp32 copy 8, read + write
    # the fp32 main gradient 8
    per_mb = psi * (2 + 8 + 8) / (sc.hardware.hbm_gb_s * 1e9)
    assert on["grad_accum"] == pytest.approx(16 * per_mb, rel=1e-9)
    assert on["iteration_s"] - off["iteration_s"] == pytest.approx(16 * per_mb, rel=1e-9)
    assert off["grad_accum"] == 0
    parts = ("compute", "bubble", "tp_comm", "cp_comm", "ep_comm", "zero3_gather",
             "grad_accum", "pp_comm", "dp_comm", "optimizer")
    assert sum(on[k] for k in parts) == pytest.approx(on["iteration_s"], rel=1e-9)


def test_embedding_stage_puts_one_layer_less_on_the_last_stage():
    # 14 layers + 2 over 4 stages: middle stages hold 4 layers, the first and last 3 and the
    # embedding / logits. A tiny vocabulary: the last stage is faster than a middle one, so
    # the pipeline runs at a middle stage's pace; a huge one: the last stage sets it.
    def run(vocab):
        sc = scenario(model={"layers": 14, "vocab": vocab}, parallel={"embedding_stage": True},
                      cluster={"buildings": [{"gpus": 8}]}, training={"global_batch": 32})
        return sc, one(sc, Plan(tp=2, pp=4, dp=1, zero=0, recompute="none"))

    _, small = run(8)
    ref = scenario(model={"layers": 16, "vocab": 8}, cluster={"buildings": [{"gpus": 8}]},
                   training={"global_batch": 32})
    r16 = one(ref, Plan(tp=2, pp=4, dp=1, zero=0, recompute="none"))
    # 4 layers per stage either way; the 8-entry logits are too small to matter
    assert small["logit_mb"] == 0.0
    assert small["compute"] == pytest.approx(r16["compute"] - 32 * r16["logit_mb"] * 3,
                                             rel=1e-9)
    _, big = run(400_000)
    assert big["logit_mb"] > 0 and big["compute"] > small["compute"]
