"""Wire packing of THC indices: two 4-bit indices per byte, even element in the high nibble.

(THC reference, step 8.) Tables with more than 16 entries (b > 4) go one index per byte.
"""

from __future__ import annotations

import numpy as np
import torch


def packed_size(n: int, bits: int) -> int:
    """Bytes that ``n`` indices of ``bits`` bits take on the wire."""
    return (n + 1) // 2 if bits <= 4 else n


def pack_indices(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack uint8 indices (values < 2**bits) into wire bytes."""
    q = q.to(torch.uint8).reshape(-1)
    if bits > 4:
        return q.clone()
    if q.numel() % 2:
        q = torch.cat([q, q.new_zeros(1)])
    pairs = q.view(-1, 2)
    return (pairs[:, 0] << 4) | pairs[:, 1]


def unpack_indices(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_indices`: the first ``n`` uint8 indices."""
    packed = packed.to(torch.uint8).reshape(-1)
    if bits > 4:
        return packed[:n].clone()
    out = torch.stack(((packed >> 4) & 0xF, packed & 0xF), dim=1).reshape(-1)
    return out[:n]


def nibble_lookup(table: tuple[int, ...] | list[int], dtype: np.dtype | type) -> np.ndarray:
    """A ``(256, 2)`` array mapping a packed byte to the table values of its two nibbles."""
    t = np.asarray(table, dtype=np.int64)
    b = np.arange(256)
    hi = t[np.minimum(b >> 4, len(t) - 1)]
    lo = t[np.minimum(b & 0xF, len(t) - 1)]
    return np.stack([hi, lo], axis=1).astype(dtype)
