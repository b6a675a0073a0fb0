"""THC lookup tables: the optimal table for (b, g, p), rounding tables and predicted error.

The table maps a b-bit index to an integer value in ``0..g``. It is the choice of ``2**b`` points
of the grid ``{0..g}`` (always including 0 and g) that minimises the expected variance of
stochastic rounding, ``E[(hi - x)(x - lo)]``, for a standard normal truncated at ``±T`` and
expressed in table units ``x = (z + T) / inc`` with ``inc = 2T/g`` (Li et al., "THC:
Accelerating Distributed Deep Learning Using Tensor Homomorphic Compression", NSDI 2024, §4).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import ndtr, ndtri

#: The artifact's table for the defaults b=4, g=30, p=1/32 (THC reference, "Defaults").
DEFAULT_TABLE: tuple[int, ...] = (0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30)
DEFAULT_BITS = 4
DEFAULT_GRANULARITY = 30
DEFAULT_CLIP_MASS = 1.0 / 32
DEFAULT_FINE_GRID = 1001


def clip_threshold(p: float) -> float:
    """Clip threshold ``T = Φ⁻¹(1 − p/2)`` in standard deviations (THC reference, "Defaults")."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"clip mass p={p} must lie in (0, 1); the default is 1/32")
    return float(ndtri(1.0 - p / 2.0))


def _segment_costs(g: int, T: float) -> np.ndarray:
    """``cost[i, j] = ∫_i^j (j − x)(x − i) φ(x) dx`` in table units, for all ``0 ≤ i < j ≤ g``.

    ``φ`` is the standard normal density restricted to ``[−T, T]`` and mapped to ``x ∈ [0, g]``.
    Computed in closed form from the truncated normal's partial moments on each unit cell.
    """
    inc = 2.0 * T / g
    edges = np.arange(g + 1, dtype=np.float64)
    z = edges * inc - T
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    cdf = ndtr(z)
    # Partial moments of x over each unit cell [k, k+1]: m0 = P, m1 = E[x·1], m2 = E[x²·1].
    # For z ~ N(0,1): ∫ φ = ΔΦ, ∫ zφ = −Δφ, ∫ z²φ = ΔΦ − Δ(zφ); x = (z + T)/inc.
    i0 = np.diff(cdf)
    i1 = -np.diff(pdf)
    i2 = np.diff(cdf) - np.diff(z * pdf)
    m0 = i0
    m1 = (i1 + T * i0) / inc
    m2 = (i2 + 2 * T * i1 + T * T * i0) / (inc * inc)
    c0, c1, c2 = (np.concatenate([[0.0], np.cumsum(m)]) for m in (m0, m1, m2))
    i = edges[:, None]
    j = edges[None, :]
    s0 = c0[None, :] - c0[:, None]
    s1 = c1[None, :] - c1[:, None]
    s2 = c2[None, :] - c2[:, None]
    # (j − x)(x − i) = −x² + (i + j)x − ij
    cost = -s2 + (i + j) * s1 - i * j * s0
    return np.where(j > i, cost, np.inf)


@lru_cache(maxsize=64)
def optimal_table(bits: int, granularity: int, clip_mass: float) -> tuple[int, ...]:
    """Optimal table by dynamic programming over the grid ``{0..g}``.

    Parameters
    ----------
    bits : int
        b, the table has ``2**b`` entries.
    granularity : int
        g, table values are integers in ``0..g``; needs ``g ≥ 2**b − 1``.
    clip_mass : float
        p, the tail mass clipped at ``±T``.

    Returns
    -------
    tuple of int
        Increasing table values, first 0 and last g.
    """
    n = 1 << bits
    if bits < 1 or bits > 8:
        raise ValueError(f"bits={bits} must be in 1..8")
    if granularity < n - 1:
        raise ValueError(f"granularity g={granularity} must be >= 2**bits - 1 = {n - 1}")
    T = clip_threshold(clip_mass)
    cost = _segment_costs(granularity, T)
    g = granularity
    # best[k, j]: minimal cost of k segments covering [0, j] with breakpoints on the grid.
    best = np.full((n, g + 1), np.inf)
    arg = np.zeros((n, g + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for k in range(1, n):
        tot = best[k - 1][:, None] + cost  # [i, j]
        arg[k] = np.argmin(tot, axis=0)
        best[k] = tot[arg[k], np.arange(g + 1)]
    pts = [g]
    for k in range(n - 1, 0, -1):
        pts.append(int(arg[k, pts[-1]]))
    return tuple(reversed(pts))


def table_cost(table: tuple[int, ...] | list[int], granularity: int, clip_mass: float) -> float:
    """Expected rounding variance (table units²) of ``table`` for the truncated normal."""
    cost = _segment_costs(granularity, clip_threshold(clip_mass))
    return float(sum(cost[a, b] for a, b in itertools.pairwise(table)))


def default_table(bits: int, granularity: int, clip_mass: float) -> tuple[int, ...]:
    """The table netco uses: the artifact's for the defaults, else :func:`optimal_table`."""
    if (bits, granularity) == (DEFAULT_BITS, DEFAULT_GRANULARITY) and math.isclose(
        clip_mass, DEFAULT_CLIP_MASS
    ):
        return DEFAULT_TABLE
    return optimal_table(bits, granularity, clip_mass)


@dataclass(frozen=True)
class RoundingTables:
    """Precomputed second-stage rounding: fine-grid point ``k`` → (lower index, P(round up)).

    Fine-grid point ``k`` sits at ``v_k = k·g/(G−1)`` table units. Its neighbours in the table
    are ``L[lo_k] ≤ v_k ≤ L[lo_k + 1]``; rounding up with probability
    ``(v_k − L[lo_k]) / (L[lo_k+1] − L[lo_k])`` keeps the value unbiased (THC reference, step 6).
    """

    lo: np.ndarray  # int64[G]
    p_up: np.ndarray  # float32[G]


def rounding_tables(table: tuple[int, ...], granularity: int, fine_grid: int) -> RoundingTables:
    """Build :class:`RoundingTables` for ``table`` over a fine grid of ``fine_grid`` points."""
    L = np.asarray(table, dtype=np.float64)
    v = np.arange(fine_grid, dtype=np.float64) * granularity / (fine_grid - 1)
    lo = np.clip(np.searchsorted(L, v, side="right") - 1, 0, len(L) - 2)
    p = (v - L[lo]) / (L[lo + 1] - L[lo])
    return RoundingTables(lo=lo.astype(np.int64), p_up=np.clip(p, 0.0, 1.0).astype(np.float32))


def predicted_nmse(
    table: tuple[int, ...], granularity: int, clip_mass: float, fine_grid: int = DEFAULT_FINE_GRID
) -> dict[str, float]:
    """Per-coordinate error of one encode/decode on N(0,1) coordinates, from the table.

    Returns the rounding variance (both stages, truncated-normal mass inside ±T, clipped mass at
    the ends has none), the clipping error ``E[(z − clip(z))²]`` and their sum, all in units of
    the coordinate variance, i.e. the NMSE (THC reference: ≈ 0.0131 + 0.0073 = 0.0203).
    """
    T = clip_threshold(clip_mass)
    inc = 2 * T / granularity
    delta = 2 * T / (fine_grid - 1)
    # Integrate numerically on a dense grid over [−T, T].
    zs = np.linspace(-T, T, 200_001)
    w = np.exp(-0.5 * zs * zs) / math.sqrt(2 * math.pi)
    dz = zs[1] - zs[0]
    u = (zs + T) / delta
    k0 = np.floor(u)
    f = u - k0
    var_fine = f * (1 - f) * delta * delta
    # Second stage: the expected variance over the two fine points' table rounding.
    L = np.asarray(table, dtype=np.float64)

    def table_var(k: np.ndarray) -> np.ndarray:
        v = np.clip(k, 0, fine_grid - 1) * granularity / (fine_grid - 1)
        lo = np.clip(np.searchsorted(L, v, side="right") - 1, 0, len(L) - 2)
        return (L[lo + 1] - v) * (v - L[lo]) * inc * inc

    var_table = (1 - f) * table_var(k0) + f * table_var(k0 + 1)
    rounding = float(np.sum((var_fine + var_table) * w) * dz)
    # Clipping error: 2 ∫_T^∞ (z − T)² φ(z) dz = 2[(1 + T²)(1 − Φ(T)) − T φ(T)].
    phiT = math.exp(-0.5 * T * T) / math.sqrt(2 * math.pi)
    clipping = 2 * ((1 + T * T) * (1 - float(ndtr(T))) - T * phiT)
    return {"rounding": rounding, "clipping": clipping, "nmse": rounding + clipping}
