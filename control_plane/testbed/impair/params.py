"""What an impaired link does to its frames: delay, jitter, loss, duplication, reordering, rate.

The parameters follow ``tc netem`` (delay with uniform jitter, random loss, duplication,
reordering) plus a bandwidth cap as ``tc tbf`` applies it. One :class:`Impairment` describes
both directions of a link; each direction draws from its own seeded random stream.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


class ImpairmentError(RuntimeError):
    """An impairment that was asked for is not in effect (or could not be set up)."""


@dataclass(frozen=True)
class Impairment:
    """Impairments of one link (both directions).

    Parameters
    ----------
    delay_ms : float
        Added one-way delay.
    jitter_ms : float
        Each frame's delay is ``delay_ms + U(-jitter_ms, +jitter_ms)`` (clipped at 0). As with
        netem, jitter larger than the gap between frames reorders them.
    loss_pct : float
        Percent of frames dropped at random (independently per frame).
    dup_pct : float
        Percent of frames sent twice.
    reorder_pct : float
        Percent of frames held back an extra ``reorder_gap_ms``, so that the frames after them
        overtake them.
    reorder_gap_ms : float
        Extra hold of a reordered frame.
    bandwidth_mbps : float or None
        Rate cap (token bucket) per direction, Mbit/s.
    seed : int
        Seed of the random decisions (direction ``d`` uses ``(seed, d)``).
    """

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    dup_pct: float = 0.0
    reorder_pct: float = 0.0
    reorder_gap_ms: float = 2.0
    bandwidth_mbps: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        problems = []
        for name in ("delay_ms", "jitter_ms", "reorder_gap_ms"):
            v = getattr(self, name)
            if not 0.0 <= v <= 100_000.0:
                problems.append(f"{name}={v}: must be in 0..100000 ms")
        for name in ("loss_pct", "dup_pct", "reorder_pct"):
            v = getattr(self, name)
            if not 0.0 <= v <= 100.0:
                problems.append(f"{name}={v}: must be a percentage in 0..100")
        if self.loss_pct >= 100.0:
            problems.append("loss_pct=100: a link that drops everything is a cut; use < 100")
        if self.bandwidth_mbps is not None and not 0.001 <= self.bandwidth_mbps <= 1e7:
            problems.append(f"bandwidth_mbps={self.bandwidth_mbps}: must be in 0.001..1e7 Mbit/s")
        if self.reorder_pct > 0 and self.reorder_gap_ms <= 0:
            problems.append("reorder_gap_ms must be > 0 when reorder_pct > 0")
        if problems:
            raise ValueError("Impairment: " + "; ".join(problems))

    @property
    def active(self) -> bool:
        """True when the link is impaired at all."""
        return self.needs_timing or self.loss_pct > 0 or self.bandwidth_mbps is not None

    @property
    def needs_timing(self) -> bool:
        """True when frames must be held or copied (delay, jitter, duplication, reordering):
        work for netem or the user-space forwarder; loss and rate alone the kernel does."""
        return any(v > 0 for v in (self.delay_ms, self.jitter_ms, self.dup_pct, self.reorder_pct))

    def to_dict(self) -> dict:
        """Plain dict (JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Impairment:
        """Inverse of :meth:`to_dict` (unknown keys are an error)."""
        names = {f.name for f in fields(cls)}
        bad = sorted(set(d) - names)
        if bad:
            raise ValueError(f"Impairment: unknown fields {bad}; known: {sorted(names)}")
        return cls(**d)

    def describe(self) -> str:
        """Short human-readable form, e.g. ``delay 5ms±1 loss 1% 100Mbit/s``."""
        parts = []
        if self.delay_ms or self.jitter_ms:
            parts.append(f"delay {self.delay_ms:g}ms" + (f"±{self.jitter_ms:g}" if self.jitter_ms else ""))
        if self.loss_pct:
            parts.append(f"loss {self.loss_pct:g}%")
        if self.dup_pct:
            parts.append(f"dup {self.dup_pct:g}%")
        if self.reorder_pct:
            parts.append(f"reorder {self.reorder_pct:g}% (gap {self.reorder_gap_ms:g}ms)")
        if self.bandwidth_mbps is not None:
            parts.append(f"{self.bandwidth_mbps:g}Mbit/s")
        return " ".join(parts) or "none"
