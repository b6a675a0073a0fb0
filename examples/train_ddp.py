"""A plain PyTorch DDP training script, as you may already have one, with netco attached.

A small byte-level language model (an embedding, two GRU layers, a linear head: 0.3 M
parameters) learns this file's own text; every rank reads its own windows of it. Run it

* as it is, fp32 gradients averaged by gloo::

      torchrun --standalone --nproc_per_node 2 examples/train_ddp.py

* with THC gradients summed in the switch of a netco job (docs/attach.md)::

      netco run --config examples/net.yaml --job demo -- \\
          torchrun --standalone --nproc_per_node 2 examples/train_ddp.py --netco

The netco part is the three lines marked ``netco`` below; ``--thc-gloo`` runs the same THC
hook with torch.distributed doing the sums instead of a switch (the losses are the same, bit
for bit). ``--losses FILE`` writes rank 0's losses as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn import functional
from torch.nn.parallel import DistributedDataParallel


class ByteLM(torch.nn.Module):
    """Next-byte prediction: embedding -> 2-layer GRU -> linear."""

    def __init__(self, width: int = 128) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(256, width)
        self.rnn = torch.nn.GRU(width, width, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(width, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.embed(x))
        return self.head(h)


def batch(data: torch.Tensor, rank: int, step: int, size: int = 16, length: int = 64):
    """This rank's windows of the text for ``step`` (the same on every run)."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    start = torch.randint(0, data.numel() - length - 1, (size,), generator=g)
    idx = start[:, None] + torch.arange(length + 1)
    w = data[idx]
    return w[:, :-1], w[:, 1:]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40, help="training steps (default 40)")
    p.add_argument("--netco", action="store_true",
                   help="THC through the switch of the job in $NETCO_JOB (netco run sets it)")
    p.add_argument("--thc-gloo", action="store_true",
                   help="THC with torch.distributed summing (no switch), for comparison")
    p.add_argument("--losses", default=None, metavar="FILE", help="write rank 0's losses here")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = torch.tensor(list(Path(__file__).read_bytes()), dtype=torch.long)
    torch.manual_seed(0)
    model = DistributedDataParallel(ByteLM())
    if args.netco:
        from host.ddp import attach  # netco
        state = attach(model)                   # netco: the job from $NETCO_JOB
    elif args.thc_gloo:
        from host.ddp import THCHookState, thc_hook
        state = THCHookState()
        model.register_comm_hook(state, thc_hook)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    t0 = time.time()
    for step in range(args.steps):
        x, y = batch(data, rank, step)
        loss = functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            sent = f", {state.bytes_sent / 1e3:.0f} kB sent" if args.netco or args.thc_gloo else ""
            print(f"step {step:3d}  loss {loss.item():.4f}{sent}", flush=True)
    if args.netco or args.thc_gloo:
        state.close()                           # netco: leave the job
    if rank == 0:
        print(f"{args.steps} steps in {time.time() - t0:.1f} s on {world} ranks", flush=True)
        if args.losses:
            Path(args.losses).write_text(json.dumps(losses))
    # every rank done before the process group goes: gloo aborts a process (std::terminate)
    # whose group is torn down while a peer still finishes its last collective
    dist.barrier()
    del model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
