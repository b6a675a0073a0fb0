"""``netco demo``: the main job on the embedded default (no switch hardware, no BMv2).

Today it shows THC on real gradients: four workers each compute the gradient of a small CNN
on their own shard of scikit-learn's digits, agree on the chunk norms, encode to 4-bit indices,
sum the integers (what the switch does) and decode the average. It prints bits per coordinate
up and down, the error against the exact average and the time of each step.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from host.thc.codec import THCCodec
from host.thc.simulate import allreduce


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def worker_gradients(workers: int, seed: int) -> list[torch.Tensor]:
    """Flattened gradients of one small CNN on ``workers`` disjoint shards of digits."""
    from sklearn.datasets import load_digits

    torch.manual_seed(seed)
    data = load_digits()
    xs = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    ys = torch.tensor(data.target)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 16, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10),
    )
    grads = []
    for w in range(workers):
        model.zero_grad()
        idx = torch.arange(w, len(ys), workers)[:128]
        torch.nn.functional.cross_entropy(model(xs[idx]), ys[idx]).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    return grads


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    grads = worker_gradients(args.workers, args.seed)
    t_grad = time.perf_counter() - t0
    codec = THCCodec()
    t1 = time.perf_counter()
    res = allreduce(codec, grads)
    t_thc = time.perf_counter() - t1
    exact = torch.stack(grads).mean(0)
    nmse = float(((res.average - exact) ** 2).sum() / (exact**2).sum())
    cos = float(torch.nn.functional.cosine_similarity(res.average, exact, dim=0))
    n = exact.numel()
    report = {
        "workers": args.workers,
        "elements": n,
        "bits_per_coordinate_up": 8 * res.bytes_up / n,
        "bits_per_coordinate_down": 8 * res.bytes_down / n,
        "fp32_bits": 32,
        "lane_bits": res.lane_bits,
        "nmse_vs_exact_average": nmse,
        "cosine_vs_exact_average": cos,
        "gradient_s": t_grad,
        "thc_allreduce_s": t_thc,
        "backend": "fused" if codec._use_fused(exact) else "torch",
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"THC all-reduce of a real CNN gradient ({n} elements) over {args.workers} workers")
    print(f"  uplink   {report['bits_per_coordinate_up']:.2f} bits/coordinate (fp32: 32)")
    print(f"  downlink {report['bits_per_coordinate_down']:.2f} bits/coordinate "
          f"({res.lane_bits}-bit integer lanes)")
    print(f"  error    NMSE {nmse:.4f} vs the exact average (cosine {cos:.4f})")
    print(f"  time     {t_thc * 1e3:.1f} ms for norms, {args.workers} encodes, integer sum, decode "
          f"({report['backend']} kernels)")
    return 0
