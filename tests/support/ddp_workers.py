"""Code the spawned ranks of ``tests/host/ddp/test_ddp_hook.py`` run (spawn imports it by name).

One call of :func:`hook_checks` per world size runs every distributed check in one process
group, to pay the process start-up (importing torch) once; the test functions assert on what
each rank returned.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from host.aggregation import LaneValueError, TorchDistributedAggregator
from host.ddp import THCHookState, thc_hook
from host.thc.config import THCConfig

BUCKET_NUMEL = 5000  # not a multiple of the 1024 block: exercises the padding


def rank_vector(rank: int, numel: int = BUCKET_NUMEL) -> torch.Tensor:
    """The fixed 'gradient' of ``rank`` (parents recompute it to simulate)."""
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(numel, generator=g) * (1.0 + 0.25 * rank)


class Linear1(nn.Module):
    """loss = <w, c> so that w.grad is exactly c."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(numel))

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        return (self.w * c).sum()


class Reversed(nn.Module):
    """Layers registered in the opposite order of use, so DDP's first bucket order is wrong and
    it rebuilds the buckets after the first iteration (different parameters per bucket)."""

    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(48, 8)
        self.mid = nn.Linear(48, 48)
        self.inp = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.mid(torch.relu(self.inp(x)))))


def _gloo_probe() -> dict:
    out: dict = {}
    for name, dt, v in (("int32", torch.int32, 200), ("uint8", torch.uint8, 200),
                        ("int8", torch.int8, 100), ("int16", torch.int16, 200)):
        t = torch.full((3,), v, dtype=dt)
        try:
            dist.all_reduce(t)
            out[name] = t.tolist()
        except Exception as exc:
            out[name] = f"error: {exc}"
    return out


def _lane_checks(rank: int, world: int) -> dict:
    agg = TorchDistributedAggregator()
    out: dict = {}
    for max_value in (255 // world, 200):  # uint8 at the boundary; int32 when n·g > 255
        g = torch.Generator().manual_seed(7 + rank + 100 * max_value)
        lanes = torch.randint(0, max_value + 1, (4097,), generator=g, dtype=torch.int32)
        lanes[:8] = max_value  # the largest possible sums
        agg.lane_dtypes_used.clear()
        sums, count = agg.sum_lanes(lanes, max_value)
        exact = lanes.to(torch.int64)
        dist.all_reduce(exact)
        out[max_value] = {"equal": bool(torch.equal(sums.to(torch.int64), exact)), "count": count,
                          "dtypes": sorted(str(d) for d in agg.lane_dtypes_used),
                          "first": int(sums[0])}
    try:  # every rank offers a value above the declared maximum: refused before sending
        agg.sum_lanes(torch.full((4,), 31, dtype=torch.int32), 30)
        out["too_big"] = "accepted"
    except LaneValueError as exc:
        out["too_big"] = str(exc)
    out["max"] = agg.max_floats(torch.tensor([float(rank), -float(rank)])).tolist()
    return out


def _fixed_bucket(rank: int, world: int) -> dict:
    model = Linear1(BUCKET_NUMEL)
    ddp = DistributedDataParallel(model)
    state = THCHookState(THCConfig(), error_feedback=False)
    ddp.register_comm_hook(state, thc_hook)
    ddp(rank_vector(rank)).backward()
    exact = rank_vector(rank).clone()
    dist.all_reduce(exact)
    return {"thc": model.w.grad.detach().clone(), "exact": exact / world,
            "history": [(h.step, h.sent, h.received) for h in state.history],
            "after_backward": (state.bytes_sent, state.bytes_received),
            "expected_bytes": state.bytes_per_bucket(BUCKET_NUMEL, world)}


def _rebuild(rank: int, world: int) -> dict:
    torch.manual_seed(0)
    model = Reversed()
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.004)
    state = THCHookState(THCConfig(), error_feedback=True, trace=True)
    ddp.register_comm_hook(state, thc_hook)
    g = torch.Generator().manual_seed(50 + rank)
    snapshots = []
    for _ in range(3):
        x = torch.randn(32, 16, generator=g)
        ddp(x).square().mean().backward()
        snapshots.append({k: v.clone() for k, v in state.memory.items()})
        for p in model.parameters():
            p.grad = None
    sizes = {state.param_key(p): p.numel() for p in model.parameters()}
    return {"trace": state.trace, "snapshots": snapshots, "sizes": sizes}


def _warmup(rank: int, world: int) -> dict:
    model = Linear1(BUCKET_NUMEL)
    ddp = DistributedDataParallel(model)
    state = THCHookState(start_thc_iter=1)
    ddp.register_comm_hook(state, thc_hook)
    grads = []
    for _ in range(2):
        ddp(rank_vector(rank)).backward()
        grads.append(model.w.grad.detach().clone())
        model.w.grad = None
    return {"grads": grads, "history": [(h.step, h.sent, h.received) for h in state.history],
            "memory_keys": len(state.memory)}


def tiny_vector(rank: int) -> torch.Tensor:
    """A gradient whose second 1024-element chunk is subnormal (norm ~1e-39)."""
    c = rank_vector(rank, 3072)
    c[1024:2048] *= 1e-41
    return c


def _tiny(rank: int, world: int) -> dict:
    model = Linear1(3072)
    ddp = DistributedDataParallel(model)
    state = THCHookState(error_feedback=True)
    ddp.register_comm_hook(state, thc_hook)
    ddp(tiny_vector(rank)).backward()
    mem = next(iter(state.memory.values()))
    return {"grad": model.w.grad.detach().clone(), "memory": mem.clone()}


def _nan(rank: int, world: int) -> dict:
    model = Linear1(3000)
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(THCHookState(), thc_hook)
    c = rank_vector(rank, 3000)
    if rank == world - 1:
        c[1234] = float("nan")
    try:
        ddp(c).backward()
    except Exception as exc:
        return {"raised": f"{type(exc).__name__}: {exc}"}
    return {"raised": None}


def hook_checks(rank: int, world: int) -> dict:
    """Every distributed check of the hook tests, in one process group."""
    return {"gloo": _gloo_probe(), "lanes": _lane_checks(rank, world),
            "fixed": _fixed_bucket(rank, world), "rebuild": _rebuild(rank, world),
            "warmup": _warmup(rank, world), "tiny": _tiny(rank, world), "nan": _nan(rank, world)}
