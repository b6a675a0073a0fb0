"""The THC codec: encode a worker's tensor to table indices, decode an integer sum.

Implements steps 1-11 of THC (listed in docs/thc.md; Li et al., "THC: Accelerating
Distributed Deep Learning Using Tensor Homomorphic Compression", NSDI 2024, arXiv 2302.08545;
artifact SophiaLi06/BytePS_THC): chunking and zero padding, randomized block Hadamard
transform with shared signs, per-chunk norms agreed as a global maximum, scaling and clipping at
±T, two-stage stochastic rounding to table indices with per-worker randomness, error feedback,
4-bit packing, and the decode of an integer sum of ``m`` contributions (unbiased also for
partial sums).

Two interchangeable backends compute the same numbers bit for bit: a vectorized torch path that
runs on any device (the reference) and fused C kernels for the CPU (``_fused.c``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch

from host.thc import fused
from host.thc.config import THCConfig
from host.thc.hadamard import fwht_
from host.thc.layout import Layout, Segment, make_layout
from host.thc.packing import pack_indices, packed_size, unpack_indices
from host.thc.rng import rounding_key, sign_tensor, signs_key, uniform_pair
from host.thc.table import rounding_tables

log = logging.getLogger(__name__)

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class NonFiniteError(ValueError):
    """The input holds NaN or Inf; the message names the chunk and the element range."""


class InputRangeError(ValueError):
    """A finite input too large for the float32 transform; the message names the chunk."""


#: Largest finite float32.
F32_MAX = float(np.finfo(np.float32).max)
#: Headroom between a chunk norm times √block and float32's maximum. One butterfly pass is at
#: most √B·‖x‖ per coordinate; the residual and the decode add at most ~4x on top (the
#: reconstruction is at most T·M·√(padded/length) per block), so 8 keeps every intermediate
#: of the encode, the residual and the decode finite.
NORM_HEADROOM = 8.0


def max_norm(block: int) -> float:
    """Largest chunk norm a chunk of Hadamard block ``block`` can be encoded with."""
    return F32_MAX / (NORM_HEADROOM * math.sqrt(block))


def _chunk_text(lay: Layout, index: int) -> str:
    c = lay.chunks[index]
    return f"chunk {c.index} (elements {c.start}..{c.start + c.length - 1})"


def _too_large(lay: Layout, index: int, why: str) -> InputRangeError:
    return InputRangeError(f"{_chunk_text(lay, index)} is too large to encode in float32: {why}; "
                           f"scale the tensor down")


@dataclass
class Encoded:
    """One worker's encoding of one tensor for one round.

    Attributes
    ----------
    payload : torch.Tensor
        uint8 wire bytes: packed indices of all padded coordinates, chunk after chunk.
    layout : Layout
        Chunking of the flat tensor.
    norms : torch.Tensor
        float32 global norms (one per chunk) the encoding was scaled with.
    residual : torch.Tensor or None
        Error-feedback memory for the next round (flat, float32), when asked for.
    """

    payload: torch.Tensor
    layout: Layout
    norms: torch.Tensor
    residual: torch.Tensor | None = None


@dataclass(frozen=True)
class _SegConsts:
    """Per-chunk float32 constants of one segment (same values in both backends)."""

    scale: np.ndarray  # √len / M (0 when M = 0)
    a1: np.ndarray  # inc·M/√len: value of one table unit after decoding
    b1: np.ndarray  # (g/2)·inc·M/√len
    rs: float  # 1/√block


def _f32(v: float) -> float:
    return float(np.float32(v))


class THCCodec:
    """Encoder/decoder for one THC configuration.

    Parameters
    ----------
    config : THCConfig
        Shared by all workers and the aggregator.
    backend : {"auto", "torch", "fused"}
        ``auto`` uses the fused C kernels for CPU tensors when they are built, else torch.
    """

    def __init__(self, config: THCConfig | None = None, backend: str = "auto") -> None:
        self.cfg = config or THCConfig()
        if backend not in ("auto", "torch", "fused"):
            raise ValueError(f"backend={backend!r}: choose auto, torch or fused")
        if backend == "fused" and not fused.available():
            raise RuntimeError(f"fused THC kernels are not built: {fused.import_error()}")
        self.backend = backend
        cfg = self.cfg
        self.table = cfg.levels
        rt = rounding_tables(self.table, cfg.granularity, cfg.fine_grid)
        self._lo = rt.lo
        self._p_up = rt.p_up
        self._T = _f32(cfg.T)
        self._inv_delta = _f32((cfg.fine_grid - 1) / (2.0 * cfg.T))
        self._lo32 = rt.lo.astype(np.int32)
        self._levels32 = np.asarray(self.table, dtype=np.float32)
        self._dev_cache: dict[torch.device, tuple[torch.Tensor, ...]] = {}
        self._layouts: dict[int, Layout] = {}

    # ------------------------------------------------------------------ helpers
    def layout(self, numel: int) -> Layout:
        """Chunk layout of a tensor with ``numel`` elements (cached: buckets repeat)."""
        lay = self._layouts.get(numel)
        if lay is None:
            if len(self._layouts) > 256:
                self._layouts.clear()
            lay = self._layouts[numel] = make_layout(numel, self.cfg)
        return lay

    def payload_bytes(self, numel: int) -> int:
        """Uplink bytes of one encoding of ``numel`` elements."""
        return packed_size(self.layout(numel).padded, self.cfg.bits)

    def _use_fused(self, x: torch.Tensor) -> bool:
        if self.backend == "torch" or x.device.type != "cpu":
            return False
        return fused.available()

    def _tables_on(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        if device not in self._dev_cache:
            self._dev_cache[device] = (
                torch.as_tensor(self._lo, device=device),
                torch.as_tensor(self._p_up, device=device),
                torch.as_tensor(self.table, dtype=torch.float32, device=device),
            )
        return self._dev_cache[device]

    def _check_norms(self, lay: Layout, norms: torch.Tensor) -> None:
        """Refuse norms that are not finite, negative, or too large for the transform."""
        arr = norms.numpy()
        bad = ~(np.isfinite(arr) & (arr >= 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"norm of chunk {i} is {arr[i]}: norms must be finite and >= 0")
        for seg in lay.segments:
            seg_norms = arr[seg.first : seg.first + seg.count]
            limit = max_norm(seg.block)
            over = np.flatnonzero(seg_norms > limit)
            if over.size:
                i = seg.first + int(over[0])
                raise _too_large(lay, i, f"norm {float(arr[i]):.3g} > {limit:.3g}")

    def _consts(self, seg: Segment, norms: torch.Tensor) -> _SegConsts:
        """Scale constants of the chunks of ``seg`` from their global norms (float64 → f32)."""
        cfg = self.cfg
        M = norms[seg.first : seg.first + seg.count].numpy().astype(np.float64)
        # Scale by the chunk's real length, not its padded one: the zero padding carries no
        # energy, so √(padded)/M would inflate the blocks that hold the data and clip them
        # (a 1025-element chunk pads to 2048). Identical to the reference's d without padding.
        sq = math.sqrt(seg.length)
        with np.errstate(divide="ignore", over="ignore"):
            scale = np.where(M > 0, sq / np.where(M > 0, M, 1.0), 0.0)
            # A (subnormal) norm so small that √len/M overflows float32 cannot be scaled:
            # such a chunk is sent as zeros (its value stays in the error memory).
            tiny = ~np.isfinite(scale.astype(np.float32))
        scale[tiny] = 0.0
        M = np.where(tiny, 0.0, M)
        a1 = cfg.inc * M / sq
        b1 = cfg.granularity / 2 * cfg.inc * M / sq
        return _SegConsts(scale.astype(np.float32), a1.astype(np.float32), b1.astype(np.float32),
                          _f32(1.0 / math.sqrt(seg.block)))

    @staticmethod
    def _flat32(x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in FLOAT_DTYPES:
            raise TypeError(f"THC encodes float tensors (fp32/fp16/bf16/fp64), got {x.dtype}")
        return x.reshape(-1).to(torch.float32).contiguous()

    # ------------------------------------------------------------------ norms
    def chunk_norms(self, x: torch.Tensor) -> torch.Tensor:
        """Per-chunk L2 norms (float32) of ``x``: what each worker sends for agreement.

        Raises
        ------
        NonFiniteError
            If a chunk holds NaN or Inf.
        InputRangeError
            If a chunk's norm is too large for the float32 transform (:func:`max_norm`).
        """
        flat = x.reshape(-1)
        lay = self.layout(flat.numel())
        parts = []
        fast = flat.dtype == torch.float32 and flat.is_contiguous() and self._use_fused(flat)
        for seg in lay.segments:
            part = flat[seg.start : seg.start + seg.numel]
            if fast:
                sq = torch.from_numpy(fused.chunk_sumsq(part, seg.length))
            else:
                sq = torch.linalg.vector_norm(part.reshape(seg.count, seg.length), dim=1,
                                              dtype=torch.float64).cpu() ** 2
            parts.append(sq)
        sumsq = torch.cat(parts)
        bad = ~torch.isfinite(sumsq)
        if bool(bad.any()):
            c = lay.chunks[int(bad.nonzero()[0])]
            seg = flat[c.start : c.start + c.length]
            nf = (~torch.isfinite(seg)).nonzero()
            where = f"element {c.start + int(nf[0])}" if nf.numel() else "norm overflow"
            raise NonFiniteError(
                f"chunk {c.index} (elements {c.start}..{c.start + c.length - 1}) holds a "
                f"NaN or Inf value ({where})"
            )
        norms = sumsq.sqrt()
        for seg in lay.segments:
            seg_norms = norms[seg.first : seg.first + seg.count]
            limit = max_norm(seg.block)
            over = (seg_norms > limit).nonzero()
            if over.numel():
                i = seg.first + int(over[0])
                raise _too_large(lay, i, f"norm {float(norms[i]):.3g} > {limit:.3g}")
        return norms.to(torch.float32)

    # ------------------------------------------------------------------ encode
    def encode(
        self,
        x: torch.Tensor,
        norms: torch.Tensor,
        *,
        worker: int,
        round: int,
        stream: int = 0,
        residual: bool = False,
    ) -> Encoded:
        """Encode ``x`` scaled by the agreed global chunk norms ``norms``.

        Parameters
        ----------
        x : torch.Tensor
            Any shape; float32/16/bf16/64. With error feedback, pass gradient + memory.
        norms : torch.Tensor
            float32, one per chunk: the maximum over workers of :meth:`chunk_norms`.
        worker, round, stream : int
            Key the per-worker rounding randomness; ``round``/``stream`` also key the shared
            signs (all workers must use the same round and stream for one aggregation).
        residual : bool
            Also return ``x − own decode`` (error-feedback memory for the next round).

        Raises
        ------
        ValueError
            If a norm is negative or not finite.
        InputRangeError
            If a norm exceeds :func:`max_norm` or a chunk's transform (or residual) overflows
            float32 (``x`` far above the norms it is scaled with); both backends alike.
        """
        flat = self._flat32(x)
        lay = self.layout(flat.numel())
        norms = torch.as_tensor(norms, dtype=torch.float32).reshape(-1).cpu()
        if norms.numel() != lay.n_chunks:
            raise ValueError(f"got {norms.numel()} norms for {lay.n_chunks} chunks")
        self._check_norms(lay, norms)
        nb = packed_size(lay.padded, self.cfg.bits)
        res = torch.empty_like(flat) if residual else None
        payload = torch.empty(nb, dtype=torch.uint8, device=flat.device)
        self.encode_into(flat, norms, lay.segments, payload, worker=worker, round=round,
                         stream=stream, residual=res)
        return Encoded(payload, lay, norms, res)

    def encode_into(self, flat: torch.Tensor, norms: torch.Tensor, segments, payload: torch.Tensor,
                    *, worker: int, round: int, stream: int = 0,
                    residual: torch.Tensor | None = None) -> None:
        """Encode only the chunks of ``segments`` into their bytes of ``payload``.

        ``segments`` is a part of ``self.layout(flat.numel()).segments`` or of its
        :func:`~host.thc.layout.split_layout` pieces, each starting at an even padded offset;
        ``flat`` the whole flat float32 tensor, ``norms`` all global chunk norms, ``payload``
        the whole packed buffer (``packed_size(layout.padded)`` bytes) and ``residual`` the
        whole error memory or None. Every coordinate's randomness is keyed by its position,
        so encoding the parts one by one writes the same bytes as :meth:`encode` (what the
        pipelined all-reduce relies on: encode part i + 1 while part i is on the wire).
        """
        skey = signs_key(self.cfg.seed, stream, round)
        rkey = rounding_key(self.cfg.seed, stream, worker, round)
        lay = self.layout(flat.numel())
        if self._use_fused(flat):
            for seg in segments:
                bad = fused.encode_segment(self, flat, seg, self._consts(seg, norms), skey, rkey,
                                           payload, residual)
                if bad >= 0:
                    raise _too_large(lay, seg.first + bad, "its transform overflows")
            return
        bits = self.cfg.bits
        for seg in segments:
            k = self._consts(seg, norms)
            qs, rs = self._encode_segment_torch(lay, flat, seg, k, skey, rkey,
                                                residual is not None)
            packed = pack_indices(qs, bits)
            b0 = seg.offset // 2 if bits <= 4 else seg.offset
            payload[b0 : b0 + packed.numel()] = packed
            if residual is not None:
                residual[seg.start : seg.start + seg.numel] = rs

    def _pad(self, flat: torch.Tensor, seg: Segment) -> torch.Tensor:
        """The segment's chunks as rows ``(count, padded)``, zero-padded."""
        x = flat[seg.start : seg.start + seg.numel].reshape(seg.count, seg.length)
        if seg.padded == seg.length:
            return x
        out = torch.zeros(seg.count, seg.padded, dtype=torch.float32, device=flat.device)
        out[:, : seg.length] = x
        return out

    def _encode_segment_torch(
        self, lay: Layout, flat: torch.Tensor, seg: Segment, k: _SegConsts, skey: int, rkey: int,
        residual: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        dev = flat.device
        lo, p_up, levels = self._tables_on(dev)
        n = seg.padded_total
        x = self._pad(flat, seg).reshape(-1)
        D = sign_tensor(skey, seg.offset, n, dev)
        y = fwht_(x * D, seg.block) * k.rs
        self._check_overflow(lay, seg, y)
        scale = torch.from_numpy(k.scale).to(dev)[:, None]
        z = torch.clamp(y.view(seg.count, seg.padded) * scale, -self._T, self._T).reshape(-1)
        u = (z + self._T) * self._inv_delta
        k0 = torch.clamp(torch.floor(u), 0, self.cfg.fine_grid - 2)
        frac = u - k0
        r1, r2 = uniform_pair(rkey, seg.offset, n, dev)
        kk = k0.to(torch.int64) + (r1 < frac).to(torch.int64)
        q = lo[kk] + (r2 < p_up[kk]).to(torch.int64)
        rs = None
        if residual:
            a1 = torch.from_numpy(k.a1).to(dev)[:, None]
            b1 = torch.from_numpy(k.b1).to(dev)[:, None]
            yhat = (levels[q].view(seg.count, seg.padded) * a1 - b1).reshape(-1)
            back = (fwht_(y - yhat, seg.block) * k.rs * D).view(seg.count, seg.padded)
            self._check_overflow(lay, seg, back[:, : seg.length])
            rs = back[:, : seg.length].reshape(-1)
        return q.to(torch.uint8), rs

    @staticmethod
    def _check_overflow(lay: Layout, seg: Segment, v: torch.Tensor) -> None:
        """Refuse a segment whose transform overflowed float32 (as the fused kernel does)."""
        bad = ~torch.isfinite(v.reshape(seg.count, -1)).all(dim=1)
        if bool(bad.any()):
            raise _too_large(lay, seg.first + int(bad.nonzero()[0]), "its transform overflows")

    # ------------------------------------------------------------------ decode
    def decode(
        self,
        sums: torch.Tensor | np.ndarray,
        count: int | torch.Tensor | np.ndarray,
        norms: torch.Tensor,
        numel: int,
        *,
        round: int,
        stream: int = 0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Decode an integer sum of ``count`` contributions into their average.

        ``ŷ = (S/m − g/2)·inc·M/√d``, ``x̂ = D ⊙ Hᵀŷ``, padding dropped (THC reference, step 11).

        Parameters
        ----------
        sums : array of int
            Lane sums of table values for all padded coordinates (any integer dtype).
        count : int or array of int
            m, the number of contributions in each sum: a scalar, or one per padded coordinate
            (partial sums of different slots). Must be ≥ 1.
        norms : torch.Tensor
            The global chunk norms used by every contributor.
        numel : int
            Elements of the original flat tensor.
        round, stream : int
            As passed to :meth:`encode` (they key the shared signs).
        dtype : torch.dtype
            Output dtype (the input's).
        """
        lay = self.layout(numel)
        if isinstance(sums, np.ndarray):
            sums = torch.from_numpy(sums)
        if sums.numel() < lay.padded:
            raise ValueError(f"got {sums.numel()} sums for {lay.padded} padded coordinates")
        norms = torch.as_tensor(norms, dtype=torch.float32).reshape(-1).cpu()
        per_coord = not isinstance(count, int)
        if per_coord:
            count = torch.as_tensor(count).reshape(-1)
            if count.numel() == 1:
                count, per_coord = int(count), False
        if per_coord:
            if count.numel() < lay.padded:
                raise ValueError(f"got {count.numel()} counts for {lay.padded} coordinates")
            if bool((count < 1).any()):
                raise ValueError("every contribution count must be >= 1")
        elif count < 1:
            raise ValueError(f"contribution count m={count} must be >= 1")
        dev = torch.device(device) if device is not None else sums.device
        out = torch.empty(numel, dtype=torch.float32, device=dev)
        self.decode_into(sums, count, norms, lay.segments, out, round=round, stream=stream)
        return out.to(dtype)

    def decode_into(self, sums: torch.Tensor, count: int | torch.Tensor, norms: torch.Tensor,
                    segments, out: torch.Tensor, *, round: int, stream: int = 0) -> None:
        """Decode only the chunks of ``segments`` into their elements of ``out`` (float32,
        the whole flat result); ``sums`` (and a per-coordinate ``count``) cover all padded
        coordinates, ``norms`` all chunks. Parts decoded one by one give what :meth:`decode`
        gives (the signs are keyed by position)."""
        skey = signs_key(self.cfg.seed, stream, round)
        dev = out.device
        per_coord = not isinstance(count, int)
        if dev.type == "cpu" and self._use_fused(out):
            for seg in segments:
                fused.decode_segment(self, sums, count, seg, self._consts(seg, norms), skey, out)
        else:
            for seg in segments:
                k = self._consts(seg, norms)
                n = seg.padded_total
                s = sums[seg.offset : seg.offset + n].to(dev, torch.float32).view(seg.count, -1)
                a1 = torch.from_numpy(k.a1).to(dev)[:, None]
                b1 = torch.from_numpy(k.b1).to(dev)[:, None]
                if per_coord:
                    m = count[seg.offset : seg.offset + n].to(dev, torch.float32).view(seg.count, -1)
                else:
                    m = torch.tensor(float(count), device=dev)
                yhat = (s * (a1 / m) - b1).reshape(-1)
                D = sign_tensor(skey, seg.offset, n, dev)
                back = (fwht_(yhat, seg.block) * k.rs * D).view(seg.count, seg.padded)
                out[seg.start : seg.start + seg.numel] = back[:, : seg.length].reshape(-1)

    # ------------------------------------------------------------------ conveniences
    def indices(self, enc: Encoded) -> torch.Tensor:
        """The uint8 table indices of an encoding (unpacked)."""
        return unpack_indices(enc.payload, self.cfg.bits, enc.layout.padded)

    def values(self, enc: Encoded) -> torch.Tensor:
        """The table values (int32) of an encoding: one worker's contribution to a sum."""
        idx = self.indices(enc).to(torch.int64)
        levels = torch.as_tensor(self.table, dtype=torch.int32, device=idx.device)
        return levels[idx]
