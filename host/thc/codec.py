"""The THC codec: encode a worker's tensor to table indices, decode an integer sum.

Implements steps 1-11 of the THC reference (``shared/reference/thc.md``; Li et al., "THC:
Accelerating Distributed Deep Learning Using Tensor Homomorphic Compression", NSDI 2024):
chunking and zero padding, randomized block Hadamard transform with shared signs, per-chunk
norms agreed as a global maximum, scaling and clipping at ±T, two-stage stochastic rounding to
table indices with per-worker randomness, error feedback, 4-bit packing, and the decode of an
integer sum of ``m`` contributions (unbiased also for partial sums).

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
from host.thc.layout import Chunk, Layout, make_layout
from host.thc.packing import pack_indices, packed_size, unpack_indices
from host.thc.rng import rounding_key, sign_tensor, signs_key, uniform_pair
from host.thc.table import rounding_tables

log = logging.getLogger(__name__)

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class NonFiniteError(ValueError):
    """The input holds NaN or Inf; the message names the chunk and the element range."""


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
class _ChunkConsts:
    scale: float  # √d / M (0 when M = 0), float32
    a1: float  # inc·M/√d: value of one table unit after decoding, float32
    b1: float  # (g/2)·inc·M/√d, float32
    rs: float  # 1/√block, float32


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
        self._dev_cache: dict[torch.device, tuple[torch.Tensor, ...]] = {}

    # ------------------------------------------------------------------ helpers
    def layout(self, numel: int) -> Layout:
        """Chunk layout of a tensor with ``numel`` elements."""
        return make_layout(numel, self.cfg)

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

    def _consts(self, c: Chunk, M: float) -> _ChunkConsts:
        cfg = self.cfg
        M = float(np.float32(M))
        # Scale by the chunk's real length, not its padded one: the zero padding carries no
        # energy, so √(padded)/M would inflate the blocks that hold the data and clip them
        # (a 1025-element chunk pads to 2048). Identical to the reference's d without padding.
        d = c.length
        if M > 0:
            scale = _f32(math.sqrt(d) / M)
            a1 = _f32(cfg.inc * M / math.sqrt(d))
            b1 = _f32(cfg.granularity / 2 * cfg.inc * M / math.sqrt(d))
        else:
            scale = a1 = b1 = 0.0
        return _ChunkConsts(scale, a1, b1, _f32(1.0 / math.sqrt(c.block)))

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
        """
        flat = x.reshape(-1)
        lay = self.layout(flat.numel())
        norms = torch.empty(len(lay.chunks), dtype=torch.float32)
        fast = flat.dtype == torch.float32 and flat.is_contiguous() and self._use_fused(flat)
        for c in lay.chunks:
            seg = flat[c.start : c.start + c.length]
            if fast:
                nrm = torch.tensor(math.sqrt(fused.sumsq(seg)), dtype=torch.float64)
            else:
                nrm = torch.linalg.vector_norm(seg, dtype=torch.float64)
            if not torch.isfinite(nrm):
                bad = (~torch.isfinite(seg)).nonzero()
                where = f"element {c.start + int(bad[0])}" if bad.numel() else "norm overflow"
                raise NonFiniteError(
                    f"chunk {c.index} (elements {c.start}..{c.start + c.length - 1}) holds a "
                    f"NaN or Inf value ({where})"
                )
            norms[c.index] = float(nrm)
        return norms

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
        """
        flat = self._flat32(x)
        lay = self.layout(flat.numel())
        norms = torch.as_tensor(norms, dtype=torch.float32).reshape(-1).cpu()
        if norms.numel() != len(lay.chunks):
            raise ValueError(f"got {norms.numel()} norms for {len(lay.chunks)} chunks")
        skey = signs_key(self.cfg.seed, stream, round)
        rkey = rounding_key(self.cfg.seed, stream, worker, round)
        nb = packed_size(lay.padded, self.cfg.bits)
        res = torch.empty_like(flat) if residual else None
        if self._use_fused(flat):
            payload = torch.empty(nb, dtype=torch.uint8)
            for c in lay.chunks:
                k = self._consts(c, float(norms[c.index]))
                fused.encode_chunk(self, flat, c, k, skey, rkey, payload, res)
            return Encoded(payload, lay, norms, res)
        q = torch.empty(lay.padded, dtype=torch.uint8, device=flat.device)
        for c in lay.chunks:
            k = self._consts(c, float(norms[c.index]))
            qc, rc = self._encode_chunk_torch(flat, c, k, skey, rkey, residual)
            q[c.offset : c.offset + c.padded] = qc
            if res is not None:
                res[c.start : c.start + c.length] = rc
        return Encoded(pack_indices(q, self.cfg.bits), lay, norms, res)

    def _encode_chunk_torch(
        self, flat: torch.Tensor, c: Chunk, k: _ChunkConsts, skey: int, rkey: int, residual: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        dev = flat.device
        lo, p_up, levels = self._tables_on(dev)
        x = torch.zeros(c.padded, dtype=torch.float32, device=dev)
        x[: c.length] = flat[c.start : c.start + c.length]
        D = sign_tensor(skey, c.offset, c.padded, dev)
        y = fwht_(x * D, c.block) * k.rs
        z = torch.clamp(y * k.scale, -self._T, self._T)
        u = (z + self._T) * self._inv_delta
        k0 = torch.clamp(torch.floor(u), 0, self.cfg.fine_grid - 2)
        frac = u - k0
        r1, r2 = uniform_pair(rkey, c.offset, c.padded, dev)
        kk = k0.to(torch.int64) + (r1 < frac).to(torch.int64)
        q = lo[kk] + (r2 < p_up[kk]).to(torch.int64)
        rc = None
        if residual:
            yhat = levels[q] * k.a1 - k.b1
            rc = (fwht_(y - yhat, c.block) * k.rs * D)[: c.length]
        return q.to(torch.uint8), rc

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
        skey = signs_key(self.cfg.seed, stream, round)
        dev = torch.device(device) if device is not None else sums.device
        out = torch.empty(numel, dtype=torch.float32, device=dev)
        if dev.type == "cpu" and self._use_fused(out):
            for c in lay.chunks:
                k = self._consts(c, float(norms[c.index]))
                fused.decode_chunk(self, sums, count, c, k, skey, out)
        else:
            for c in lay.chunks:
                k = self._consts(c, float(norms[c.index]))
                s = sums[c.offset : c.offset + c.padded].to(dev, torch.float32)
                m = (
                    count[c.offset : c.offset + c.padded].to(dev, torch.float32)
                    if per_coord
                    else torch.tensor(float(count), device=dev)
                )
                a = torch.tensor(k.a1, dtype=torch.float32, device=dev) / m
                yhat = s * a - k.b1
                D = sign_tensor(skey, c.offset, c.padded, dev)
                out[c.start : c.start + c.length] = (fwht_(yhat, c.block) * k.rs * D)[: c.length]
        return out.to(dtype)

    # ------------------------------------------------------------------ conveniences
    def indices(self, enc: Encoded) -> torch.Tensor:
        """The uint8 table indices of an encoding (unpacked)."""
        return unpack_indices(enc.payload, self.cfg.bits, enc.layout.padded)

    def values(self, enc: Encoded) -> torch.Tensor:
        """The table values (int32) of an encoding: one worker's contribution to a sum."""
        idx = self.indices(enc).to(torch.int64)
        levels = torch.as_tensor(self.table, dtype=torch.int32, device=idx.device)
        return levels[idx]
