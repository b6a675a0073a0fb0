"""Error feedback for THC (THC reference, steps 1 and 7).

Each worker adds the error it made last round to this round's gradient before encoding, and
keeps ``x − own decode`` for the next round, so clipping and rounding errors are not lost but
delayed (Seide et al. 2014; Karimireddy et al., "Error Feedback Fixes SignSGD", ICML 2019).
"""

from __future__ import annotations

from collections.abc import Hashable

import torch


class ErrorFeedback:
    """Per-tensor error memory, keyed by any hashable (a parameter name, a bucket's index).

    Parameters
    ----------
    enabled : bool
        With False, :meth:`apply` returns the gradient unchanged and nothing is stored.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.memory: dict[Hashable, torch.Tensor] = {}

    def apply(self, key: Hashable, grad: torch.Tensor) -> torch.Tensor:
        """Gradient plus the stored error of ``key`` (float32, flat)."""
        x = grad.reshape(-1).to(torch.float32)
        if not self.enabled:
            return x
        mem = self.memory.get(key)
        if mem is None or mem.numel() != x.numel():
            return x.clone()
        return x + mem.to(x.device)

    def store(self, key: Hashable, residual: torch.Tensor | None) -> None:
        """Keep ``residual`` (``x − own decode``) for the next round of ``key``."""
        if self.enabled and residual is not None:
            self.memory[key] = residual.detach().reshape(-1)

    def norm(self) -> float:
        """L2 norm of all stored memory (a health figure)."""
        return float(sum(float(m.float().square().sum()) for m in self.memory.values()) ** 0.5)
