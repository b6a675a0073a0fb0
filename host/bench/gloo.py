"""Timing torch.distributed's own all-reduce: the baseline netco's numbers are compared with."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def time_allreduce(x: torch.Tensor, repeats: int) -> tuple[list[float], torch.Tensor]:
    """Seconds of each of ``repeats`` all-reduces of a copy of ``x`` in the current process
    group (the ranks start each together: a barrier first), and the last sum (``x`` for none)."""
    import torch.distributed as dist

    times, y = [], x
    for _ in range(repeats):
        y = x.clone()
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(y)
        times.append(time.perf_counter() - t0)
    return times, y
