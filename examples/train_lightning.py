"""The model of ``train_ddp.py`` trained with PyTorch Lightning, THC through a netco switch.

Lightning registers the communication hook itself; netco gives it the hook and a state that
joins the job at the first gradient bucket (docs/attach.md, "PyTorch Lightning")::

    netco run --config examples/net.yaml --job demo -- \\
        torchrun --standalone --nproc_per_node 2 examples/train_lightning.py --netco

``--thc-gloo``: the same hook with torch.distributed summing (the losses are the same, bit for
bit); neither flag: Lightning's plain DDP. Needs ``pip install lightning``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import lightning
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch.nn import functional
from train_ddp import ByteLM, batch


class Module(lightning.LightningModule):
    def __init__(self, data: torch.Tensor) -> None:
        super().__init__()
        self.model = ByteLM()
        self.data = data
        self.losses: list[float] = []

    def training_step(self, step: torch.Tensor, _idx: int) -> torch.Tensor:
        x, y = batch(self.data, self.global_rank, int(step[0]))
        loss = functional.cross_entropy(self.model(x).reshape(-1, 256), y.reshape(-1))
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=3e-3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--netco", action="store_true", help="THC through the job in $NETCO_JOB")
    p.add_argument("--thc-gloo", action="store_true", help="THC summed by torch.distributed")
    p.add_argument("--losses", default=None, metavar="FILE", help="write rank 0's losses here")
    args = p.parse_args()
    hook = {}
    if args.netco:
        from host.ddp import comm_state, thc_hook  # netco
        hook = {"ddp_comm_state": comm_state(), "ddp_comm_hook": thc_hook}   # netco
    elif args.thc_gloo:
        from host.ddp import THCHookState, thc_hook
        hook = {"ddp_comm_state": THCHookState(), "ddp_comm_hook": thc_hook}
    torch.manual_seed(0)
    data = torch.tensor(list((Path(__file__).parent / "train_ddp.py").read_bytes()))
    module = Module(data)
    steps = torch.arange(args.steps).reshape(-1, 1)
    loader = torch.utils.data.DataLoader(steps, batch_size=None, shuffle=False)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))      # torchrun's
    trainer = lightning.Trainer(accelerator="cpu", devices=local,
                        num_nodes=int(os.environ.get("WORLD_SIZE", local)) // local,
                        strategy=DDPStrategy(process_group_backend="gloo", **hook),
                        max_steps=args.steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        use_distributed_sampler=False)
    trainer.fit(module, loader)
    if args.netco or args.thc_gloo:
        hook["ddp_comm_state"].close()
    if trainer.global_rank == 0:
        print(f"{args.steps} steps, last loss {module.losses[-1]:.4f}", flush=True)
        if args.losses:
            Path(args.losses).write_text(json.dumps(module.losses))
    # Lightning leaves the process group up; a gloo group still up when the interpreter
    # finalises can abort the process ("terminate called without an active exception")
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
