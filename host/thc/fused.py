"""Python side of the fused CPU kernels (``_fused.c``), bit-exact with the torch path."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:  # pragma: no cover
    from host.thc.codec import THCCodec, _ChunkConsts
    from host.thc.layout import Chunk

try:
    from host.thc import _fused  # type: ignore[attr-defined]

    _ERR: str | None = None
except ImportError as exc:  # pragma: no cover - depends on the build
    _fused = None
    _ERR = str(exc)


def available() -> bool:
    """Whether the C kernels were built (``pip install`` builds them with gcc)."""
    return _fused is not None


def import_error() -> str | None:
    """Why the kernels are unavailable, or None."""
    return _ERR


#: Elements per thread below which the kernels stay single-threaded: starting and joining
#: OpenMP threads costs more than it saves on small chunks (and much more on a busy machine).
MIN_PER_THREAD = 1 << 17


def threads(n: int | None = None) -> int:
    """Threads for ``n`` elements: torch's intra-op thread count, fewer for small inputs."""
    t = max(1, torch.get_num_threads())
    if n is not None:
        t = min(t, max(1, n // MIN_PER_THREAD))
    return t


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


def encode_chunk(
    codec: THCCodec,
    flat: torch.Tensor,
    c: Chunk,
    k: _ChunkConsts,
    skey: int,
    rkey: int,
    payload: torch.Tensor,
    residual: torch.Tensor | None,
) -> None:
    """Encode one chunk into its slice of ``payload`` (and ``residual``)."""
    cfg = codec.cfg
    nb0 = c.offset // 2 if cfg.bits <= 4 else c.offset
    nb1 = (c.offset + c.padded + 1) // 2 if cfg.bits <= 4 else c.offset + c.padded
    _fused.encode(
        _np(flat[c.start : c.start + c.length]),
        _np(payload[nb0:nb1]),
        None if residual is None else _np(residual[c.start : c.start + c.length]),
        c.padded,
        c.block,
        c.offset,
        k.scale,
        k.a1,
        k.b1,
        k.rs,
        codec._T,
        codec._inv_delta,
        cfg.fine_grid,
        codec._lo.astype(np.int32),
        codec._p_up,
        np.asarray(codec.table, dtype=np.float32),
        cfg.bits,
        skey,
        rkey,
        threads(c.padded),
    )


def decode_chunk(
    codec: THCCodec,
    sums: torch.Tensor,
    count: int | torch.Tensor,
    c: Chunk,
    k: _ChunkConsts,
    skey: int,
    out: torch.Tensor,
) -> None:
    """Decode one chunk of lane sums into its slice of ``out``."""
    s = sums[c.offset : c.offset + c.padded].contiguous()
    if s.dtype not in (torch.uint8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32):
        s = s.to(torch.int32)
    if isinstance(count, int):
        cnt = None
        m = count
    else:
        cnt = _np(count[c.offset : c.offset + c.padded].to(torch.int32).contiguous())
        m = 1
    _fused.decode(
        _np(s),
        cnt,
        m,
        _np(out[c.start : c.start + c.length]),
        c.padded,
        c.block,
        c.offset,
        k.a1,
        k.b1,
        k.rs,
        skey,
        threads(c.padded),
    )


def sumsq(x: torch.Tensor) -> float:
    """Sum of squares of a contiguous float32 CPU tensor, accumulated in double."""
    return float(_fused.sumsq(_np(x), threads(x.numel())))


def accumulate(acc: np.ndarray, payload: np.ndarray, lut: np.ndarray) -> None:
    """``acc += lut[nibbles of payload]`` in place (uint8/16/32 lanes, int32[16] lut)."""
    _fused.accumulate(acc, payload, lut)
