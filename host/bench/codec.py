"""Codec benchmark: throughput against a tensor copy, and NMSE against baselines.

By default two tables; with --json (benchmarks/codec.py: always) one JSON
object::

    {"throughput": [{"elements", "encode_s", "decode_s", "aggregate_s", "clone_s", ...}],
     "nmse": {"gaussian": {"thc", "uniform4", "per_worker4", "fp16"}, "student_t3": {...},
              "model_gradient": {...}}}

encode_s is what a worker does per round (chunk norms + encode with the error-feedback
residual off), decode_s the decode of an 8-bit lane sum, aggregate_s the integer sum of four
workers' packed payloads into 8-bit lanes, clone_s x.clone() of the same tensor in the same
run (the memory-bandwidth reference). Each time is the median of --repeat runs, in seconds.
NMSE is one encode/decode's squared error over the data's energy (lower is better).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch and the codec load when the benchmark runs, not for --help (issue 36)
    import torch


def _median_time(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def throughput(n: int, repeat: int, backend: str) -> dict[str, float | int | str]:
    """Times of encode, decode, aggregate and clone for ``n`` Gaussian elements."""
    import torch

    from host.thc.codec import THCCodec
    from host.thc.lanes import aggregate_packed

    codec = THCCodec(backend=backend)
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g)
    norms = codec.chunk_norms(x)
    enc = codec.encode(x, norms, worker=0, round=0)
    payloads = [codec.encode(x, norms, worker=w, round=0).payload for w in range(4)]
    padded = enc.layout.padded
    sums = torch.from_numpy(
        aggregate_packed(payloads, codec.table, codec.cfg.granularity, codec.cfg.bits, padded, 8)
    )

    def do_encode() -> None:
        codec.encode(x, codec.chunk_norms(x), worker=0, round=0)

    row: dict[str, float | int | str] = {
        "elements": n,
        "backend": "fused" if codec._use_fused(x) else "torch",
        "threads": torch.get_num_threads(),
        "encode_s": _median_time(do_encode, repeat),
        "decode_s": _median_time(lambda: codec.decode(sums, 4, norms, n, round=0), repeat),
        "aggregate_s": _median_time(
            lambda: aggregate_packed(payloads, codec.table, codec.cfg.granularity,
                                     codec.cfg.bits, padded, 8),
            repeat,
        ),
        "clone_s": _median_time(lambda: x.clone(), max(repeat, 5)),
    }
    row["codec_over_clone"] = (row["encode_s"] + row["decode_s"]) / row["clone_s"]
    return row


def model_gradient(seed: int = 0) -> torch.Tensor:
    """A real gradient: a small CNN's on a batch of scikit-learn's digits (flattened)."""
    import torch
    from sklearn.datasets import load_digits

    torch.manual_seed(seed)
    data = load_digits()
    xs = torch.tensor(data.images[:256], dtype=torch.float32).unsqueeze(1) / 16.0
    ys = torch.tensor(data.target[:256])
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 16, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10),
    )
    loss = torch.nn.functional.cross_entropy(model(xs), ys)
    loss.backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def _nmse(est: torch.Tensor, x: torch.Tensor) -> float:
    return float(((est.double() - x.double()) ** 2).sum() / (x.double() ** 2).sum())


def nmse_table(n: int, seed: int) -> dict[str, dict[str, float]]:
    """One encode/decode NMSE of THC and the baselines on three kinds of data."""
    import torch

    from host.thc.baselines import fp16, per_worker4, thc_roundtrip, uniform4_codec
    from host.thc.codec import THCCodec

    g = torch.Generator().manual_seed(seed)
    data = {
        "gaussian": torch.randn(n, generator=g),
        "student_t3": torch.distributions.StudentT(3.0).sample((n,)),
        "model_gradient": model_gradient(seed),
    }
    thc = THCCodec()
    uni = uniform4_codec()
    out: dict[str, dict[str, float]] = {}
    for name, x in data.items():
        out[name] = {
            "elements": x.numel(),
            "thc": _nmse(thc_roundtrip(thc, x), x),
            "uniform4": _nmse(thc_roundtrip(uni, x), x),
            "per_worker4": _nmse(per_worker4(x, g), x),
            "fp16": _nmse(fp16(x), x),
        }
    return out


def run(sizes: list[int], repeat: int, backend: str, nmse_elements: int, seed: int) -> dict:
    """The whole benchmark as one JSON-able dict."""
    import torch

    from host.thc import fused

    torch.manual_seed(seed)
    return {
        "fused_available": fused.available(),
        "throughput": [throughput(n, repeat, backend) for n in sizes],
        "nmse": nmse_table(nmse_elements, seed),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options (``netco bench codec`` and ``benchmarks/codec.py``)."""
    p.add_argument("--sizes", type=int, nargs="+", default=[1 << 20, 1 << 22, 1 << 24],
                   metavar="N", help="tensor sizes to time, in elements (default 2^20 2^22 2^24)")
    p.add_argument("--repeat", type=int, default=5,
                   help="timed runs per figure; the median is reported (default 5)")
    p.add_argument("--backend", choices=["auto", "torch", "fused"], default="auto",
                   help="codec implementation: the fused C kernels, the torch reference, or auto "
                        "(fused when built and the tensor is on the CPU; default auto)")
    p.add_argument("--nmse-elements", type=int, default=1 << 20, metavar="N",
                   help="elements of the Gaussian and Student-t data for the NMSE table "
                        "(default 2^20; the model gradient has its own size)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def check_arguments(a: argparse.Namespace) -> str | None:
    """The first bad option as one line naming it and the fix, or None."""
    for name, values in (("--sizes", a.sizes), ("--repeat", [a.repeat]),
                         ("--nmse-elements", [a.nmse_elements])):
        bad = [v for v in values if v < 1]
        if bad:
            return f"{name} {bad[0]}: must be at least 1"
    return None


def format_report(rep: dict) -> str:
    """The report as two readable tables (times in milliseconds, NMSE per data set)."""
    lines = [f"throughput (median of the timed runs; fused kernels "
             f"{'built' if rep['fused_available'] else 'not built'})",
             f"{'elements':>10}  {'backend':7}  {'threads':>7}  {'encode ms':>10}  {'decode ms':>10}"
             f"  {'aggregate ms':>12}  {'clone ms':>9}  {'codec/clone':>11}"]
    for r in rep["throughput"]:
        lines.append(f"{r['elements']:>10,}  {r['backend']:7}  {r['threads']:>7}  "
                     f"{1e3 * r['encode_s']:>10.2f}  {1e3 * r['decode_s']:>10.2f}  "
                     f"{1e3 * r['aggregate_s']:>12.2f}  {1e3 * r['clone_s']:>9.2f}  "
                     f"{r['codec_over_clone']:>10.1f}x")
    cols = ("thc", "uniform4", "per_worker4", "fp16")
    lines += ["", "NMSE of one encode/decode (lower is better)",
              f"{'data':15}  {'elements':>9}" + "".join(f"  {c:>11}" for c in cols)]
    for name, row in rep["nmse"].items():
        lines.append(f"{name:15}  {row['elements']:>9,}"
                     + "".join(f"  {row[c]:>11.4g}" for c in cols))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    a = p.parse_args(argv)
    problem = check_arguments(a)
    if problem:
        p.error(problem)
    print(json.dumps(run(a.sizes, a.repeat, a.backend, a.nmse_elements, a.seed), indent=1))
    return 0
