"""The compressors compared with THC, each as (state, DDP hook): PyTorch's own hooks.

``none``: ``allreduce_hook`` (plain averaging), ``fp16``: ``fp16_compress_hook``, ``powersgd``:
``powerSGD_hook`` (Vogels et al., "PowerSGD", NeurIPS 2019) with error feedback and warm start,
``thc``/``thc-noef``: :func:`host.ddp.thc_hook` with and without error feedback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch loads with the hooks: the names and specs need none (issue 36)
    import torch.distributed as dist

    from host.thc.config import THCConfig

COMPRESSORS = ("none", "fp16", "powersgd", "thc")

#: PowerSGD with error feedback needs two plain steps first (DDP rebuilds buckets at step 1).
POWERSGD_START_ITER = 2


@dataclass(frozen=True)
class CompressorSpec:
    """One compressor setting: ``kind`` plus its knobs; ``label`` names it in reports."""

    kind: str
    rank: int = 4
    error_feedback: bool = True
    start_iter: int = 0

    def __post_init__(self) -> None:
        if self.kind not in COMPRESSORS:
            raise ValueError(f"compressor {self.kind!r}: choose one of {', '.join(COMPRESSORS)}")
        if self.rank < 1:
            raise ValueError(f"powersgd rank={self.rank}: must be >= 1")

    @property
    def label(self) -> str:
        if self.kind == "powersgd":
            return f"powersgd-r{self.rank}"
        if self.kind == "thc" and not self.error_feedback:
            return "thc-noef"
        return self.kind


def compare_set(powersgd_ranks: tuple[int, ...] = (1, 4)) -> list[CompressorSpec]:
    """The baselines of one ``--compare`` run: none, fp16, PowerSGD ranks, THC with/without EF."""
    return [
        CompressorSpec("none"),
        CompressorSpec("fp16"),
        *(CompressorSpec("powersgd", rank=r) for r in powersgd_ranks),
        CompressorSpec("thc"),
        CompressorSpec("thc", error_feedback=False),
    ]


def make_hook(spec: CompressorSpec, *, seed: int = 0, thc_config: THCConfig | None = None,
              group: dist.ProcessGroup | None = None, aggregator: Any = None,
              thc_pipelined: bool = True) -> tuple[Any, Callable]:
    """(state, hook) for ``ddp_model.register_comm_hook(state, hook)``.

    ``aggregator`` (THC only): where the hook sums, e.g. an in-network
    :class:`host.transport.job.NetworkAggregator`; default ``torch.distributed``.
    ``thc_pipelined`` (THC only): :class:`~host.ddp.hook.THCHookState`'s ``pipelined``.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    from host.ddp.hook import THCHookState, thc_hook

    if aggregator is not None and spec.kind != "thc":
        raise ValueError(f"compressor {spec.kind!r} cannot use an in-network aggregator: the "
                         "switch sums THC encodings only")
    if spec.kind == "none":
        return group, default_hooks.allreduce_hook
    if spec.kind == "fp16":
        return group, default_hooks.fp16_compress_hook
    if spec.kind == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=group, matrix_approximation_rank=spec.rank,
            start_powerSGD_iter=max(POWERSGD_START_ITER, spec.start_iter),
            use_error_feedback=True, warm_start=True, random_seed=seed,
        )
        return state, powerSGD_hook.powerSGD_hook
    return (THCHookState(thc_config, process_group=group, error_feedback=spec.error_feedback,
                         start_thc_iter=spec.start_iter, aggregator=aggregator,
                         pipelined=thc_pipelined), thc_hook)
