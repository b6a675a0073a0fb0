"""Compressors THC is compared with (THC reference, "Defaults" and the artifact's baselines)."""

from __future__ import annotations

import torch

from host.thc.codec import THCCodec
from host.thc.config import THCConfig

#: Clip mass of the artifact's "uniform THC": the 1 − 10⁻⁴ quantile on each side (±3.72σ).
UNIFORM_CLIP_MASS = 2e-4


def uniform4_codec(block: int = 1024, seed: int = 42) -> THCCodec:
    """16 uniform levels over ±3.72σ after the same rotation and global scale as THC."""
    cfg = THCConfig(clip_mass=UNIFORM_CLIP_MASS, table=tuple(range(0, 31, 2)), block=block,
                    seed=seed)
    return THCCodec(cfg)


def per_worker4(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """4-bit stochastic quantization with the worker's own scale (QSGD-like), dequantized.

    16 levels over ``[−max|x|, max|x|]``, unbiased stochastic rounding. Each worker's scale
    differs, so an aggregator must dequantize every contribution before adding (not homomorphic).
    """
    flat = x.reshape(-1).to(torch.float32)
    s = float(flat.abs().max())
    if s == 0.0:
        return torch.zeros_like(x)
    u = (flat + s) * (15.0 / (2 * s))
    lo = torch.floor(u)
    r = torch.rand(flat.shape, generator=generator)
    q = torch.clamp(lo + (r < (u - lo)).to(lo.dtype), 0, 15)
    return (q * (2 * s / 15.0) - s).reshape(x.shape).to(x.dtype)


def fp16(x: torch.Tensor) -> torch.Tensor:
    """Round-trip through IEEE half precision (PyTorch's ``fp16_compress_hook``)."""
    return x.to(torch.float16).to(x.dtype)


def thc_roundtrip(codec: THCCodec, x: torch.Tensor, worker: int = 0, round: int = 0) -> torch.Tensor:
    """One worker's encode/decode through ``codec`` (norm agreement with itself)."""
    norms = codec.chunk_norms(x)
    enc = codec.encode(x, norms, worker=worker, round=round)
    return codec.decode(codec.values(enc), 1, norms, x.numel(), round=round,
                        dtype=x.dtype).reshape(x.shape)
