"""Python side of the fused CPU kernels (``_fused.c``), bit-exact with the torch path."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:  # pragma: no cover
    from host.thc.codec import THCCodec, _SegConsts
    from host.thc.layout import Segment

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


def encode_segment(
    codec: THCCodec,
    flat: torch.Tensor,
    seg: Segment,
    k: _SegConsts,
    skey: int,
    rkey: int,
    payload: torch.Tensor,
    residual: torch.Tensor | None,
) -> int:
    """Encode one segment of chunks into its slice of ``payload`` (and ``residual``).

    Returns the first chunk (of the segment) whose transform overflowed float32, or -1.
    """
    cfg = codec.cfg
    end = seg.offset + seg.padded_total
    nb0 = seg.offset // 2 if cfg.bits <= 4 else seg.offset
    nb1 = (end + 1) // 2 if cfg.bits <= 4 else end
    return _fused.encode(
        _np(flat[seg.start : seg.start + seg.numel]),
        _np(payload[nb0:nb1]),
        None if residual is None else _np(residual[seg.start : seg.start + seg.numel]),
        seg.count, seg.length, seg.padded, seg.block, seg.offset,
        k.scale, k.a1, k.b1, k.rs,
        codec._T, codec._inv_delta, cfg.fine_grid,
        codec._lo32, codec._p_up, codec._levels32, cfg.bits,
        skey, rkey, threads(seg.padded_total),
    )


def decode_segment(
    codec: THCCodec,
    sums: torch.Tensor,
    count: int | torch.Tensor,
    seg: Segment,
    k: _SegConsts,
    skey: int,
    out: torch.Tensor,
) -> None:
    """Decode one segment of lane sums into its slice of ``out``."""
    n = seg.padded_total
    s = sums[seg.offset : seg.offset + n].contiguous()
    if s.dtype not in (torch.uint8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32):
        s = s.to(torch.int32)
    if isinstance(count, int):
        cnt, m = None, count
    else:
        cnt, m = _np(count[seg.offset : seg.offset + n].to(torch.int32).contiguous()), 1
    _fused.decode(
        _np(s), cnt, m, _np(out[seg.start : seg.start + seg.numel]),
        seg.count, seg.length, seg.padded, seg.block, seg.offset,
        k.a1, k.b1, k.rs, skey, threads(n),
    )


def chunk_sumsq(x: torch.Tensor, length: int) -> np.ndarray:
    """Sums of squares (float64) of consecutive chunks of ``length`` in a float32 CPU tensor."""
    out = np.empty(x.numel() // length, dtype=np.float64)
    _fused.chunk_sumsq(_np(x), length, out, threads(x.numel()))
    return out


def accumulate(acc: np.ndarray, payload: np.ndarray, lut: np.ndarray) -> None:
    """``acc += lut[nibbles of payload]`` in place (uint8/16/32 lanes, int32[16] lut)."""
    _fused.accumulate(acc, payload, lut)
