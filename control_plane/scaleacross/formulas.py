"""Closed-form pieces of the cost model; each works on scalars and on numpy arrays.

Sources: parameter count and FLOPs from Narayanan et al., "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM" (SC'21), eqs. 2-3; activation memory from
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022);
collective bus-bandwidth factors from the nccl-tests performance notes; the scale-across
decomposition from Li et al., "ScaleAcross Explorer" (2026). Sizes are in elements unless a name
says bytes; times in seconds; bandwidths in bytes/s.
"""

from __future__ import annotations

import numpy as np

from control_plane.scaleacross.scenario import Model

__all__ = [
    "activation_bytes_per_layer",
    "allreduce_time",
    "alltoall_time",
    "bubble_fraction",
    "bus_factor",
    "flops_per_iteration",
    "layer_flops_fwd",
    "layer_params",
    "logit_flops_fwd",
    "megatron_params",
    "model_params",
    "model_state_bytes",
]


# ---------------------------------------------------------------------------- parameters


def megatron_params(L: float, h: float, V: float, s: float) -> float:
    """GPT parameter count, Narayanan et al. eq. 2: ``12Lh²(1 + 13/(12h) + (V+s)/(12Lh))``."""
    return 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h))


def layer_params(m: Model, moe: bool = False) -> tuple[float, float]:
    """Parameters of one transformer layer as ``(dense, expert)``.

    Attention: QKV ``h(h + 2h·kv/heads)`` and output ``h²``; MLP: ``n·h·ffn`` with n = 2 (GELU)
    or 3 (gated); 13h for biases and layer norms, as in eq. 2. For an MoE layer the MLP is
    replicated ``experts`` times (counted as expert parameters) and a router adds ``h·experts``.
    """
    h = m.hidden
    kvdim = h * m.kv / m.heads
    attn = h * (h + 2 * kvdim) + h * h
    n_mlp = 3 if m.gated_mlp else 2
    mlp = n_mlp * h * m.ffn
    if moe:
        return attn + 13 * h + h * m.experts, mlp * m.experts
    return attn + mlp + 13 * h, 0.0


def model_params(m: Model) -> dict[str, float]:
    """Total parameter counts: ``dense`` (replicated over DP), ``expert`` and ``total``.

    For a GPT model (gelu MLP, ffn = 4h, no GQA, no MoE) the total equals eq. 2 exactly
    (embedding ``V·h`` tied with the output layer, learned positions ``s·h``).
    """
    n_moe = m.moe_layers
    d_dense, _ = layer_params(m, moe=False)
    d_moe, e_moe = layer_params(m, moe=True)
    dense = (m.layers - n_moe) * d_dense + n_moe * d_moe + (m.vocab + m.seq) * m.hidden
    expert = n_moe * e_moe
    return {"dense": dense, "expert": expert, "total": dense + expert}


# ---------------------------------------------------------------------------- FLOPs


def layer_flops_fwd(m: Model, tokens: float, moe: bool = False) -> dict[str, float]:
    """Forward FLOPs of one layer for ``tokens`` tokens of full sequences, split by part.

    GEMMs cost ``2·tokens·params``; attention scores and values ``4·tokens·s·h``. An MoE layer
    sends each token to ``top_k`` experts padded to the capacity factor, so its MLP costs
    ``top_k·cf`` times a dense MLP (plus the router). For GPT this sums to
    ``24·b·s·h²(1 + s/(6h))`` per layer, the per-layer term of eq. 3.
    """
    h = m.hidden
    kvdim = h * m.kv / m.heads
    n_mlp = 3 if m.gated_mlp else 2
    attn_gemm = 2 * tokens * (h * (h + 2 * kvdim) + h * h)
    core = 4 * tokens * m.seq * h
    mlp = 2 * tokens * n_mlp * h * m.ffn
    if moe:
        mlp = mlp * m.top_k * m.capacity_factor + 2 * tokens * h * m.experts
    return {"attn_gemm": attn_gemm, "core_attn": core, "mlp": mlp}


def logit_flops_fwd(m: Model, tokens: float) -> float:
    """Forward FLOPs of the output projection to the vocabulary: ``2·tokens·h·V``."""
    return 2 * tokens * m.hidden * m.vocab


def flops_per_iteration(m: Model, batch: float, recompute: str = "full") -> float:
    """Model FLOPs of one iteration of ``batch`` sequences, counting recomputation.

    Backward is twice forward; ``full`` recompute repeats the forward of every layer
    (Narayanan eq. 3 when the model is GPT-style), ``selective`` repeats only the attention
    core (Korthikanti et al.). The logit layer is never recomputed.
    """
    tokens = batch * m.seq
    per = {"full": 4.0, "selective": 3.0, "none": 3.0}[recompute]
    total = 0.0
    for moe, count in ((False, m.layers - m.moe_layers), (True, m.moe_layers)):
        f = layer_flops_fwd(m, tokens, moe)
        layer = per * (f["attn_gemm"] + f["mlp"] + f["core_attn"])
        if recompute == "selective":
            layer += f["core_attn"]
        total += count * layer
    return total + 3 * logit_flops_fwd(m, tokens)


# ---------------------------------------------------------------------------- schedule


def bubble_fraction(p, m, v=1):
    """Pipeline bubble relative to the ideal time: ``(p-1)/(v·m)`` (Narayanan et al. §2.2)."""
    return (np.asarray(p) - 1) / (np.asarray(v) * np.asarray(m))


# ---------------------------------------------------------------------------- collectives


def bus_factor(kind: str, n):
    """nccl-tests bus-bandwidth factor: bytes each rank moves per byte of payload.

    all-reduce ``2(n-1)/n``; reduce-scatter, all-gather, all-to-all ``(n-1)/n``; the
    in-network all-reduce factor ``(n-1)/(n+1)`` is the one the ScaleAcross paper reports for
    switch aggregation; it is reported here, while the time model of in-network aggregation
    (one upload plus one download per rank, :mod:`cost`) does not go below ``S/BW``.
    """
    n = np.asarray(n, dtype=float)
    if kind == "allreduce":
        return 2 * (n - 1) / n
    if kind in ("reducescatter", "allgather", "alltoall"):
        return (n - 1) / n
    if kind == "ina":
        return (n - 1) / (n + 1)
    raise ValueError(f"unknown collective {kind!r}")


def allreduce_time(nbytes, n, bw, alpha):
    """Ring all-reduce: ``2(n-1)/n · bytes / BW + 2(n-1)·α`` (0 when n = 1)."""
    n = np.asarray(n, dtype=float)
    t = bus_factor("allreduce", n) * nbytes / bw + 2 * (n - 1) * alpha
    return np.where(n > 1, t, 0.0)


def alltoall_time(nbytes, n, bw, alpha):
    """All-to-all of ``bytes`` per rank: ``(n-1)/n · bytes / BW + (n-1)·α`` (0 when n = 1)."""
    n = np.asarray(n, dtype=float)
    t = bus_factor("alltoall", n) * nbytes / bw + (n - 1) * alpha
    return np.where(n > 1, t, 0.0)


# ---------------------------------------------------------------------------- memory


def model_state_bytes(psi, d, zero):
    """Mixed-precision Adam states per GPU for ``psi`` parameters on it, DP degree ``d``.

    16 bytes/param (2 weight, 2 gradient, 12 fp32 master+moments); ZeRO-1 (distributed
    optimizer) ``4Ψ + 12Ψ/d``; ZeRO-2 ``2Ψ + 14Ψ/d``; ZeRO-3 ``16Ψ/d`` (Rajbhandari et al.).
    """
    d = np.asarray(d, dtype=float)
    zero = np.asarray(zero)
    return np.select(
        [zero == 0, zero == 1, zero == 2],
        [16 * psi, 4 * psi + 12 * psi / d, 2 * psi + 14 * psi / d],
        16 * psi / d,
    )


def activation_bytes_per_layer(s, b, h, a, t, sp, recompute, moe_scale=1.0):
    """Activation bytes one layer keeps for one microbatch (Korthikanti et al. eqs. 1-6).

    ``s`` is the per-rank sequence (divide by CP first). No recompute, TP with sequence
    parallelism: ``sbh(34/t + 5as/(ht))``; without SP: ``sbh(10 + 24/t + 5as/(ht))``;
    selective recompute drops the ``5as/h`` term; full recompute keeps only the layer input
    (``2sbh/t`` with SP, ``2sbh`` without). ``moe_scale`` multiplies the MLP share (19 of
    the 34) for MoE layers (``top_k·capacity``).
    """
    sbh = s * b * h
    sp = np.asarray(sp, dtype=bool)
    t = np.asarray(t, dtype=float)
    mlp = 19 * (moe_scale - 1.0)
    lin = np.where(sp, (34 + mlp) / t, 10 + (24 + mlp) / t)
    core = 5 * a * s / (h * t)
    rc = np.asarray(recompute)
    full = np.where(sp, 2 / t, 2.0)
    per = np.select([rc == 0, rc == 1], [lin + core, lin], full)
    return sbh * per
