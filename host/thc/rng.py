"""Counter-based random numbers shared by the torch and the fused CPU paths.

Every random bit THC draws is a pure function of a 64-bit key and a position: the key mixes
(seed, stream, worker, round, purpose) and the position is the coordinate's index in the padded
layout. Results are therefore reproducible, independent of thread scheduling, identical on
every device, and bit-exact between the torch path and the C kernels (``_fused.c`` implements the
same functions). The mixer is the SplitMix64 finaliser (Steele, Lea, Flood, OOPSLA 2014).
"""

from __future__ import annotations

import torch

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
C1 = 0xBF58476D1CE4E5B9
C2 = 0x94D049BB133111EB

#: Purposes mixed into keys so the sign stream and the rounding stream never coincide.
PURPOSE_SIGNS = 0x5349474E  # "SIGN"
PURPOSE_ROUND = 0x524E4431  # "RND1"


def mix64(z: int) -> int:
    """SplitMix64 finaliser on a Python int (64-bit, wrapping)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * C1) & MASK64
    z = ((z ^ (z >> 27)) * C2) & MASK64
    return z ^ (z >> 31)


def derive_key(*parts: int) -> int:
    """Fold integers (seed, stream, worker, round, purpose, …) into one 64-bit key."""
    key = 0
    for p in parts:
        key = mix64(key ^ mix64((int(p) & MASK64) + GOLDEN))
    return key


def signs_key(seed: int, stream: int, rnd: int) -> int:
    """Key of the Hadamard signs: shared by all workers (no worker id)."""
    return derive_key(seed, stream, rnd, PURPOSE_SIGNS)


def rounding_key(seed: int, stream: int, worker: int, rnd: int) -> int:
    """Key of the rounding randomness: independent per worker (THC reference, step 6)."""
    return derive_key(seed, stream, worker, rnd, PURPOSE_ROUND)


def _signed(v: int) -> int:
    v &= MASK64
    return v - (1 << 64) if v >> 63 else v


_C1 = _signed(C1)
_C2 = _signed(C2)
_GOLDEN = _signed(GOLDEN)


def _srl(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 tensors."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def hash_positions(key: int, pos: torch.Tensor) -> torch.Tensor:
    """``mix64(key + (pos + 1)·GOLDEN)`` for an int64 tensor of positions (wrapping)."""
    z = (pos + 1) * _GOLDEN + _signed(key)
    z = (z ^ _srl(z, 30)) * _C1
    z = (z ^ _srl(z, 27)) * _C2
    return z ^ _srl(z, 31)


def sign_tensor(key: int, offset: int, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """±1 float32 signs for padded positions ``offset .. offset+n``.

    Position ``p`` takes bit ``p % 64`` of ``hash(key, p // 64)``: one hash gives 64 signs.
    """
    pos = torch.arange(offset, offset + n, dtype=torch.int64, device=device)
    words = hash_positions(key, pos >> 6)
    bit = (words >> (pos & 63)) & 1  # bits 0..63; sign extension only touches bits above
    return 1.0 - 2.0 * bit.to(torch.float32)


def uniform_pair(
    key: int, offset: int, n: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent U[0,1) float32 streams (24-bit) for padded positions ``offset..+n``.

    From ``h = hash(key, p)``: ``r1 = (h >> 40)·2⁻²⁴`` and ``r2 = ((h >> 8) & 0xFFFFFF)·2⁻²⁴``.
    """
    pos = torch.arange(offset, offset + n, dtype=torch.int64, device=device)
    h = hash_positions(key, pos)
    scale = 1.0 / (1 << 24)
    r1 = _srl(h, 40).to(torch.float32) * scale
    r2 = ((h >> 8) & 0xFFFFFF).to(torch.float32) * scale
    return r1, r2
