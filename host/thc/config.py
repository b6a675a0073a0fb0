"""THC configuration and the constants derived from it (THC reference, "Defaults")."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction

from host.thc.table import (
    DEFAULT_BITS,
    DEFAULT_CLIP_MASS,
    DEFAULT_FINE_GRID,
    DEFAULT_GRANULARITY,
    clip_threshold,
    default_table,
)

DEFAULT_BLOCK = 1024
#: One norm per Hadamard block. The THC reference uses 2^20; per-block norms cost 32 bits per
#: 1024 coordinates (0.03 bits/coordinate) and cut the error on real gradients about 3x, whose
#: energy differs between layers (docs/thc.md has the measurements). ``chunk=1 << 20`` gives
#: the reference's behaviour.
DEFAULT_CHUNK = 1024
REFERENCE_CHUNK = 1 << 20
DEFAULT_SEED = 42


class THCConfigError(ValueError):
    """An invalid THC configuration; the message names the field and the fix."""


def parse_fraction(text: str | float) -> float:
    """Parse ``"1/32"``, ``"0.03125"`` or a float into a float."""
    try:
        return float(Fraction(str(text)))
    except (ValueError, ZeroDivisionError) as exc:
        raise THCConfigError(f"cannot read {text!r} as a number or fraction like 1/32") from exc


@dataclass(frozen=True)
class THCConfig:
    """Parameters of the THC codec; every worker and the aggregator must share them.

    Parameters
    ----------
    bits : int
        b, bits per coordinate on the uplink (table of ``2**b`` entries).
    granularity : int
        g, table values are integers in ``0..g``.
    clip_mass : float
        p, tail mass clipped at ``±T``, ``T = Φ⁻¹(1 − p/2)``.
    fine_grid : int
        G, points of the first rounding stage between ``−T`` and ``T``.
    block : int
        Hadamard block length, a power of two; 0 means one transform over the whole chunk.
    chunk : int
        Elements per chunk of the flattened tensor; each chunk has its own norm (default 1024,
        one per block; the reference's is 2^20).
    seed : int
        Seed of the random signs, shared by all workers.
    table : tuple of int, optional
        Explicit table; default: the artifact's for the defaults, else the optimal one.
    """

    bits: int = DEFAULT_BITS
    granularity: int = DEFAULT_GRANULARITY
    clip_mass: float = DEFAULT_CLIP_MASS
    fine_grid: int = DEFAULT_FINE_GRID
    block: int = DEFAULT_BLOCK
    chunk: int = DEFAULT_CHUNK
    seed: int = DEFAULT_SEED
    table: tuple[int, ...] | None = field(default=None)

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 8:
            raise THCConfigError(f"bits={self.bits}: must be in 1..8 (THC default 4)")
        if self.granularity < (1 << self.bits) - 1:
            raise THCConfigError(
                f"granularity={self.granularity}: must be >= 2**bits - 1 = {(1 << self.bits) - 1}"
            )
        if self.granularity > 65535:
            raise THCConfigError(f"granularity={self.granularity}: must be <= 65535")
        if not 0.0 < self.clip_mass < 1.0:
            raise THCConfigError(f"clip_mass={self.clip_mass}: must be in (0, 1), e.g. 1/32")
        if self.fine_grid < 2:
            raise THCConfigError(f"fine_grid={self.fine_grid}: must be >= 2 (THC default 1001)")
        if self.block < 0 or (self.block and self.block & (self.block - 1)):
            raise THCConfigError(f"block={self.block}: must be a power of two, or 0 for full length")
        if self.chunk < 1:
            raise THCConfigError(f"chunk={self.chunk}: must be >= 1 (default 2**20)")
        if self.block and self.chunk % self.block and self.chunk > self.block:
            raise THCConfigError(
                f"chunk={self.chunk}: must be a multiple of block={self.block} (or smaller)"
            )
        if self.table is not None:
            t = tuple(int(v) for v in self.table)
            if len(t) != 1 << self.bits:
                raise THCConfigError(f"table: has {len(t)} entries, bits={self.bits} needs {1 << self.bits}")
            if t[0] != 0 or t[-1] != self.granularity or any(b <= a for a, b in itertools.pairwise(t)):
                raise THCConfigError(
                    f"table: must increase strictly from 0 to granularity={self.granularity}"
                )
            object.__setattr__(self, "table", t)

    @property
    def levels(self) -> tuple[int, ...]:
        """The table in use (index → integer value)."""
        if self.table is not None:
            return self.table
        return default_table(self.bits, self.granularity, self.clip_mass)

    @property
    def T(self) -> float:  # noqa: N802 - the reference's symbol
        """Clip threshold in standard deviations."""
        return clip_threshold(self.clip_mass)

    @property
    def inc(self) -> float:
        """Value of one table unit, ``2T/g``."""
        return 2.0 * self.T / self.granularity

    @property
    def delta(self) -> float:
        """Fine-grid step ``2T/(G − 1)``."""
        return 2.0 * self.T / (self.fine_grid - 1)

    @property
    def uplink_bits(self) -> int:
        """Bits per coordinate on the wire up: 4 when ``bits <= 4`` (nibbles), else 8."""
        return 4 if self.bits <= 4 else 8

    def describe(self) -> dict[str, object]:
        """A JSON-able summary."""
        return {
            "bits": self.bits,
            "granularity": self.granularity,
            "clip_mass": self.clip_mass,
            "T": self.T,
            "fine_grid": self.fine_grid,
            "block": self.block,
            "chunk": self.chunk,
            "seed": self.seed,
            "table": list(self.levels),
        }


def sqrt(x: float) -> float:
    """``math.sqrt`` (kept here so derived scale constants are computed one way)."""
    return math.sqrt(x)
