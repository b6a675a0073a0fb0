"""The small interface through which gradient compressors reach aggregation.

A communication hook (``host.ddp``) never calls a collective itself: it asks an
:class:`Aggregator` to take the maximum of a few floats (THC's norm agreement, THC reference
step 3), to sum integer lanes of table values and report how many contributions the sum holds
(step 9), or to sum floats (uncompressed warm-up iterations). The same hook then runs unchanged
over ``torch.distributed`` (:class:`TorchDistributedAggregator`, here) and over the in-network
transport (a later module that ships the packed 4-bit payload to a switch).

Lane dtypes on ``torch.distributed`` (measured on gloo, torch 2.13; ``tests/host/ddp``):
int32 and int64 sum correctly, uint8/int8 sum modulo 256 without any error, int16 is refused
("Invalid scalar type"). Sums of ``n`` contributions of values ``0..g`` therefore travel in uint8
when ``n·g ≤ 255`` and in int32 otherwise; a sum can never wrap because the width is chosen from
``n·g`` and every contribution is checked against ``g`` before it is sent. NCCL accepts the same
dtypes, so nothing here excludes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch
import torch.distributed as dist

from host.thc.codec import Encoded, THCCodec
from host.thc.lanes import LaneOverflowError

log = logging.getLogger(__name__)

Count = int | torch.Tensor
"""How many contributions a sum holds: one int, or one per coordinate (partial sums)."""

INT32_MAX = (1 << 31) - 1


class LaneValueError(ValueError):
    """A contribution holds a value above the declared maximum (its sum could wrap)."""


@runtime_checkable
class Aggregator(Protocol):
    """Sum and maximum across the workers of one group; what a communication hook may call.

    Every method is collective: all workers call it in the same order with tensors of the same
    shape. The ``*_async`` variants return a :class:`torch.futures.Future` so the caller can
    overlap communication with computation (DDP hooks return such futures).
    """

    @property
    def rank(self) -> int:
        """This worker's index in the group."""
        ...

    @property
    def world_size(self) -> int:
        """Number of workers in the group."""
        ...

    def max_floats(self, x: torch.Tensor) -> torch.Tensor:
        """Element-wise maximum of ``x`` (float32) over all workers."""
        ...

    def sum_floats_async(self, x: torch.Tensor) -> torch.futures.Future[tuple[torch.Tensor, Count]]:
        """Element-wise float sum and its contribution count (uncompressed all-reduce)."""
        ...

    def sum_lanes_async(
        self, lanes: torch.Tensor, max_value_per_contribution: int
    ) -> torch.futures.Future[tuple[torch.Tensor, Count]]:
        """Sum non-negative integer lanes (each ``≤ max_value_per_contribution``) exactly."""
        ...

    def sum_encoded_async(
        self, enc: Encoded, codec: THCCodec
    ) -> torch.futures.Future[tuple[torch.Tensor, Count]]:
        """Sum the table values of every worker's THC encoding (THC reference, step 9).

        An in-network transport ships ``enc.payload`` (4 bits per coordinate) and receives the
        lane sums; this entry point lets it do so without the hook knowing.
        """
        ...


def lane_dtype(n: int, max_value: int) -> torch.dtype:
    """The narrowest dtype that ``torch.distributed`` sums exactly for ``n`` values ``≤ max_value``.

    uint8 when ``n·max_value ≤ 255``; else int32 (gloo refuses int16) up to ``2³¹ − 1``.

    Raises
    ------
    LaneOverflowError
        When even int32 could overflow.
    """
    if n < 1 or max_value < 0:
        raise ValueError(f"need n >= 1 and max_value >= 0, got n={n}, max_value={max_value}")
    total = n * max_value
    if total <= 0xFF:
        return torch.uint8
    if total <= INT32_MAX:
        return torch.int32
    raise LaneOverflowError(
        f"n·max = {n}·{max_value} = {total} does not fit an int32 lane; aggregate fewer workers "
        "per group or use a smaller granularity g"
    )


class _Clock:
    """Accumulates wall time while collectives are in flight (union of intervals)."""

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []

    def add(self, t0: float, t1: float) -> None:
        self.intervals.append((t0, t1))

    def take(self) -> float:
        """Length of the union of the recorded intervals; clears them."""
        total, end = 0.0, float("-inf")
        for a, b in sorted(self.intervals):
            if b <= end:
                continue
            total += b - max(a, end)
            end = b
        self.intervals.clear()
        return total


class TorchDistributedAggregator:
    """:class:`Aggregator` on a ``torch.distributed`` process group (gloo or NCCL).

    Parameters
    ----------
    group : ProcessGroup, optional
        Default: the world group.
    """

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized: call init_process_group first")
        self.group = group if group is not None else dist.group.WORLD
        self._rank = dist.get_rank(self.group)
        self._world = dist.get_world_size(self.group)
        #: Where the collectives' tensors must live: the current GPU for NCCL, else the CPU.
        self.device = (torch.device("cuda", torch.cuda.current_device())
                       if dist.get_backend(self.group) == "nccl" else torch.device("cpu"))
        self.lane_dtypes_used: set[torch.dtype] = set()

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world

    def max_floats(self, x: torch.Tensor) -> torch.Tensor:
        t = x.detach().to(self.device, torch.float32, copy=True)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return t.to(x.device)

    def _sum_async(self, t: torch.Tensor, post: Callable[[torch.Tensor], torch.Tensor],
                   home: torch.device, owned: bool = False
                   ) -> torch.futures.Future[tuple[torch.Tensor, Count]]:
        """All-reduce ``t`` on the group's device (a copy unless ``owned``: all_reduce works in
        place and must not touch the caller's tensor); results come back on ``home``."""
        n = self._world
        wire = t.to(self.device)
        if not owned and wire.data_ptr() == t.data_ptr():
            wire = wire.clone()
        fut = dist.all_reduce(wire, op=dist.ReduceOp.SUM, group=self.group, async_op=True).get_future()
        return fut.then(lambda f: (post(f.value()[0]).to(home), n))

    def sum_floats_async(self, x: torch.Tensor) -> torch.futures.Future[tuple[torch.Tensor, Count]]:
        return self._sum_async(x.detach(), lambda s: s, x.device)

    def sum_lanes_async(
        self, lanes: torch.Tensor, max_value_per_contribution: int
    ) -> torch.futures.Future[tuple[torch.Tensor, Count]]:
        if lanes.dtype.is_floating_point or lanes.dtype == torch.bool:
            raise TypeError(f"lanes must be an integer tensor, got {lanes.dtype}")
        if lanes.numel():
            lo, hi = (int(v) for v in torch.aminmax(lanes))
            if lo < 0 or hi > max_value_per_contribution:
                raise LaneValueError(
                    f"lane values span {lo}..{hi}, outside 0..{max_value_per_contribution}: "
                    "the sum could wrap"
                )
        return self._sum_lanes(lanes, max_value_per_contribution)

    def _sum_lanes(self, lanes: torch.Tensor, max_value: int
                   ) -> torch.futures.Future[tuple[torch.Tensor, Count]]:
        dtype = lane_dtype(self._world, max_value)
        self.lane_dtypes_used.add(dtype)
        # Sums are returned as int32 whatever the wire dtype (uint8 sums are exact: n·g ≤ 255).
        wire = lanes.to(dtype).contiguous()
        return self._sum_async(wire, lambda s: s.to(torch.int32), lanes.device,
                               owned=wire.data_ptr() != lanes.data_ptr())

    def sum_encoded_async(
        self, enc: Encoded, codec: THCCodec
    ) -> torch.futures.Future[tuple[torch.Tensor, Count]]:
        # Table values lie in 0..g by construction: no range check needed.
        return self._sum_lanes(codec.values(enc), codec.cfg.granularity)

    # Synchronous conveniences (tests, scripts).
    def sum_lanes(self, lanes: torch.Tensor, max_value_per_contribution: int) -> tuple[torch.Tensor, Count]:
        """Blocking :meth:`sum_lanes_async`."""
        return self.sum_lanes_async(lanes, max_value_per_contribution).wait()

    def sum_encoded(self, enc: Encoded, codec: THCCodec) -> tuple[torch.Tensor, Count]:
        """Blocking :meth:`sum_encoded_async`."""
        return self.sum_encoded_async(enc, codec).wait()


class CollectiveMeter:
    """Counts the bytes and the in-flight wall time of ``torch.distributed.all_reduce`` calls.

    Used by the training harness to measure what the baseline hooks (PyTorch's allreduce,
    fp16 and PowerSGD hooks) really send: while installed, every ``all_reduce`` issued through
    the ``torch.distributed`` module is counted with its tensor's bytes (once up, once down: the
    aggregator model of ``docs/training.md``) and timed from the call to its completion.
    """

    def __init__(self) -> None:
        self.bytes = 0
        self.calls = 0
        self.clock = _Clock()
        self._orig: Callable | None = None

    def install(self) -> CollectiveMeter:
        if self._orig is not None:
            return self
        orig = dist.all_reduce
        meter = self

        def metered(tensor: torch.Tensor, *args, **kwargs):
            t0 = time.perf_counter()
            meter.bytes += tensor.numel() * tensor.element_size()
            meter.calls += 1
            work = orig(tensor, *args, **kwargs)
            if work is None:
                meter.clock.add(t0, time.perf_counter())
                return work
            work.get_future().then(lambda _f: meter.clock.add(t0, time.perf_counter()))
            return work

        self._orig = orig
        dist.all_reduce = metered
        return self

    def uninstall(self) -> None:
        if self._orig is not None:
            dist.all_reduce = self._orig
            self._orig = None

    def take(self) -> tuple[int, float]:
        """(bytes, in-flight seconds) since the last call; resets both."""
        b, self.bytes = self.bytes, 0
        return b, self.clock.take()
