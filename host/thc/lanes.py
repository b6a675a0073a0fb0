"""Integer lanes for THC sums: width from n·g, overflow refused, integer aggregation.

A sum of ``n`` table values lies in ``0..n·g`` (THC reference, steps 9-10): 8-bit lanes hold
``n·g ≤ 255`` (8 workers at g = 30), 16-bit lanes ``≤ 65535``, 32-bit lanes ``≤ 2³² − 1``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from host.protocol.layout import lane_bits_for

if TYPE_CHECKING:  # torch loads where the aggregation runs: lane widths need none (issue 36)
    import torch

LANE_LIMITS = {8: 0xFF, 16: 0xFFFF, 32: 0xFFFF_FFFF}
NUMPY_LANE = {8: np.uint8, 16: np.uint16, 32: np.uint32}


class LaneOverflowError(ValueError):
    """A configuration whose sums could overflow every supported lane."""


def lane_bits(n: int, g: int, minimum: int = 8) -> int:
    """Smallest lane width (8, 16 or 32 bits, at least ``minimum``) holding ``n·g``.

    The widths are the wire protocol's (:func:`host.protocol.layout.lane_bits_for`).

    Raises
    ------
    LaneOverflowError
        When ``n·g`` exceeds 32 bits (reduce the workers per aggregation or g).
    """
    if n < 1 or g < 1:
        raise ValueError(f"need n >= 1 and g >= 1, got n={n}, g={g}")
    try:
        need = lane_bits_for(n, g)
    except ValueError as exc:
        raise LaneOverflowError(
            f"n·g = {n}·{g} = {n * g} does not fit a 32-bit lane; use fewer workers per "
            "aggregation (a tree) or a smaller granularity g"
        ) from exc
    return max(need, min(w for w in LANE_LIMITS if w >= minimum))


def check_capacity(n: int, g: int, bits: int) -> None:
    """Refuse adding ``n`` contributions of values ``≤ g`` into ``bits``-bit lanes."""
    if bits not in LANE_LIMITS:
        raise ValueError(f"lane width {bits} must be 8, 16 or 32")
    if n * g > LANE_LIMITS[bits]:
        raise LaneOverflowError(
            f"{n} contributions of up to g={g} sum to {n * g} > {LANE_LIMITS[bits]}, the "
            f"{bits}-bit lane maximum: use lanes of {lane_bits(n, g)} bits"
        )


def aggregate_packed(
    payloads: list[np.ndarray] | list[torch.Tensor],
    table: tuple[int, ...],
    g: int,
    bits: int,
    n_coords: int,
    lane: int | None = None,
) -> np.ndarray:
    """Sum the table values of several workers' packed indices into integer lanes.

    This is what the switch or the software aggregator computes (THC reference, step 9): no
    floating point. ``lane`` defaults to :func:`lane_bits` for ``len(payloads)``.
    """
    import torch

    from host.thc import fused
    from host.thc.packing import nibble_lookup

    n = len(payloads)
    lane = lane or lane_bits(n, g)
    check_capacity(n, g, lane)
    acc = np.zeros(n_coords + (n_coords & 1 if bits <= 4 else 0), dtype=NUMPY_LANE[lane])
    if bits <= 4 and fused.available():
        lut = np.zeros(16, dtype=np.int32)
        lut[: len(table)] = table
        for p in payloads:
            arr = p.numpy() if isinstance(p, torch.Tensor) else np.asarray(p)
            fused.accumulate(acc, np.ascontiguousarray(arr, dtype=np.uint8), lut)
    elif bits <= 4:
        lut = nibble_lookup(table, NUMPY_LANE[lane])
        view = acc.reshape(-1, 2)
        for p in payloads:
            arr = p.numpy() if isinstance(p, torch.Tensor) else np.asarray(p)
            view += lut[arr.astype(np.uint8, copy=False)]
    else:
        t = np.asarray(table, dtype=NUMPY_LANE[lane])
        for p in payloads:
            arr = p.numpy() if isinstance(p, torch.Tensor) else np.asarray(p)
            acc += t[arr]
    return acc[:n_coords]
