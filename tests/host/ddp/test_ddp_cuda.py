"""The THC hook on a CUDA model with NCCL (one rank); skipped where there is no GPU."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from host.aggregation import TorchDistributedAggregator
from host.ddp import THCHookState, thc_hook

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and dist.is_nccl_available()), reason="needs CUDA and NCCL"
)


@pytest.fixture
def nccl_group(tmp_path):
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_hook_on_cuda_bucket_with_nccl(nccl_group):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).cuda()
    ddp = DistributedDataParallel(model, device_ids=[0])
    agg = TorchDistributedAggregator()
    assert agg.device.type == "cuda"
    state = THCHookState(aggregator=agg)
    ddp.register_comm_hook(state, thc_hook)
    x = torch.randn(64, 256, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")
    for _ in range(3):
        ddp.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(ddp(x), y).backward()
        # The reference gradient of the same step, without communication.
        exact = torch.autograd.grad(nn.functional.cross_entropy(model(x), y), list(model.parameters()))
        got = torch.cat([p.grad.flatten() for p in model.parameters()])
        want = torch.cat([g.flatten() for g in exact])
        assert got.is_cuda and torch.isfinite(got).all()
        nmse = float((got - want).square().sum() / want.square().sum())
        assert nmse < 0.1, nmse  # one worker: THC's single-encode error plus carried memory
    assert agg.lane_dtypes_used == {torch.uint8}
    assert state.iter == 3 and all(m.is_cuda for m in state.memory.values())


def test_attach_on_cuda_with_nccl_through_the_switch(tmp_path):
    """attach on a CUDA model with an NCCL process group: the start-up agreements run on the
    GPU, the buckets go to the switch through pinned host memory (a one-member job)."""
    from host.ddp import attach
    from tests.support.switchproc import Switch, job_config, run_netco

    sw = Switch(tmp_path, 1).start()
    try:
        config = job_config(tmp_path / "net.yaml", sw, members=1)
        assert run_netco("controller", "apply", str(config)).returncode == 0
        job = tmp_path / "job.json"
        assert run_netco("controller", "job", str(config), "demo", "--out", str(job)).returncode == 0
        dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0,
                                world_size=1)
        try:
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).cuda()
            ddp = DistributedDataParallel(model, device_ids=[0])
            state = attach(ddp, job)
            x = torch.randn(64, 256, device="cuda")
            y = torch.randint(0, 10, (64,), device="cuda")
            for _ in range(3):
                ddp.zero_grad(set_to_none=True)
                nn.functional.cross_entropy(ddp(x), y).backward()
                exact = torch.autograd.grad(nn.functional.cross_entropy(model(x), y),
                                            list(model.parameters()))
                got = torch.cat([p.grad.flatten() for p in model.parameters()])
                want = torch.cat([g.flatten() for g in exact])
                assert got.is_cuda and torch.isfinite(got).all()
                nmse = float((got - want).square().sum() / want.square().sum())
                assert nmse < 0.1, nmse
            assert state.iter == 3 and state.bytes_sent > 0
            assert state.aggregator.coordinates > 0      # through the switch
            state.close()
        finally:
            dist.destroy_process_group()
    finally:
        sw.stop()
