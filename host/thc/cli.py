"""``netco thc``: run the THC protocol on your own tensors, show tables."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from host.errors import UsageError

if TYPE_CHECKING:  # numpy, torch and SciPy load where a command's work starts (issue 36)
    import numpy as np

    from host.thc.config import THCConfig


def add_codec_args(p: argparse.ArgumentParser) -> None:
    """THC parameters shared by every command that builds a codec."""
    p.add_argument("--bits", type=int, default=4, help="b, bits per coordinate (default 4)")
    p.add_argument("--granularity", type=int, default=30, help="g, table values 0..g (default 30)")
    p.add_argument("--clip", default="1/32", help="p, clipped tail mass (default 1/32)")
    p.add_argument("--block", type=int, default=1024, help="Hadamard block (0: full length)")
    p.add_argument("--chunk", type=int, default=1024,
                   help="elements per norm (default 1024; the THC reference uses 1048576)")
    p.add_argument("--seed", type=int, default=42, help="shared seed of the random signs")


def config_from_args(args: argparse.Namespace) -> THCConfig:
    """Build a :class:`THCConfig` from :func:`add_codec_args` arguments."""
    from host.thc.config import THCConfig, THCConfigError, parse_fraction

    try:
        return THCConfig(bits=args.bits, granularity=args.granularity,
                         clip_mass=parse_fraction(args.clip), block=args.block, seed=args.seed,
                         chunk=args.chunk)
    except THCConfigError as exc:
        raise UsageError(str(exc)) from exc


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="thc_command", metavar="SUBCOMMAND", required=True)
    rt = sub.add_parser(
        "roundtrip",
        help="run norm agreement, encode, integer sum and decode over worker tensors (.npy)",
        description="Each input .npy file is one worker's gradient (same shape, float dtype). "
        "Writes the decoded average and reports its error against the true average.",
    )
    rt.add_argument("--inputs", nargs="+", required=True, metavar="W.npy",
                    help="one .npy file per worker: its gradient (same shape, float dtype; "
                         "netco thc make-inputs writes examples)")
    rt.add_argument("--output", required=True, metavar="AVG.npy",
                    help="where to write the decoded average (.npy, float32)")
    rt.add_argument("--round", type=int, default=0, help="round number (keys the randomness)")
    rt.add_argument("--json", action="store_true", help="print one JSON object")
    add_codec_args(rt)
    rt.set_defaults(func=run_roundtrip)
    tb = sub.add_parser("table", help="print the table for (b, g, p) and its predicted error")
    add_codec_args(tb)
    tb.add_argument("--json", action="store_true", help="print one JSON object")
    tb.set_defaults(func=run_table)
    mk = sub.add_parser(
        "make-inputs",
        help="write example worker gradients (.npy) for roundtrip",
        description="Write one .npy file per worker: Gaussian noise around a shared signal, like "
        "gradients of the same model on different batches (PREFIX0.npy, PREFIX1.npy, ...).",
    )
    mk.add_argument("--workers", type=int, default=3, help="number of files (default 3)")
    mk.add_argument("--elements", type=int, default=10_000,
                    help="elements per file (default 10000)")
    mk.add_argument("--prefix", default="w", help="file name prefix (default w: w0.npy, w1.npy, ...)")
    mk.add_argument("--seed", type=int, default=0, help="seed of the data (default 0)")
    mk.set_defaults(func=run_make_inputs)


def _load(path: str) -> np.ndarray:
    import numpy as np

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        arr = np.load(p, allow_pickle=False)
    except Exception as exc:  # numpy raises several kinds for bad files
        raise UsageError(f"{path}: not a readable .npy file ({exc.__class__.__name__})") from exc
    if not isinstance(arr, np.ndarray) or arr.dtype.kind != "f":
        raise UsageError(f"{path}: dtype {getattr(arr, 'dtype', '?')} is not a float array")
    if arr.size == 0:
        raise UsageError(f"{path}: empty array")
    _check_values(path, arr)
    return arr


#: Elements per step of the passes over whole inputs (bounded temporaries).
STEP = 1 << 20


def _check_values(path: str, arr: np.ndarray) -> None:
    """Refuse NaN, Inf and values beyond float32's range (the codec works in float32)."""
    import numpy as np

    from host.thc.codec import F32_MAX

    flat = arr.reshape(-1)
    for i in range(0, flat.size, STEP):
        part = flat[i : i + STEP]
        if arr.dtype.itemsize > 4:
            with np.errstate(invalid="ignore"):
                bad = ~(np.abs(part) <= F32_MAX)
        else:
            bad = ~np.isfinite(part)
        if bad.any():
            j = i + int(np.flatnonzero(bad)[0])
            raise UsageError(f"{path}: element {j} is {float(flat[j])!r}; THC needs finite float32 "
                             f"values (no NaN or Inf, |x| <= {F32_MAX:.4g})")


def check_output(path: str) -> None:
    """Refuse an ``--output`` that cannot be written, before any work is done."""
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise UsageError(f"--output {path}: is a directory; give a file name such as AVG.npy")
    if not parent.is_dir():
        raise UsageError(f"--output {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"--output {path}: directory {parent} is not writable")


def nmse(out: np.ndarray, arrays: list[np.ndarray]) -> float:
    """NMSE of ``out`` against the float64 mean of ``arrays``, in steps of :data:`STEP`."""
    import numpy as np

    o = out.reshape(-1)
    flats = [a.reshape(-1) for a in arrays]
    err = denom = 0.0
    for i in range(0, o.size, STEP):
        true = flats[0][i : i + STEP].astype(np.float64)
        for f in flats[1:]:
            true += f[i : i + STEP]
        true /= len(flats)
        denom += float(np.dot(true, true))
        true -= o[i : i + STEP]
        err += float(np.dot(true, true))
    return err / denom if denom > 0 else err


def run_roundtrip(args: argparse.Namespace) -> int:
    import numpy as np

    cfg = config_from_args(args)
    check_output(args.output)
    arrays = [_load(p) for p in args.inputs]
    for path, a in zip(args.inputs[1:], arrays[1:], strict=True):
        if a.shape != arrays[0].shape:
            raise UsageError(f"{path}: shape {a.shape} differs from {args.inputs[0]}'s {arrays[0].shape}")
    import torch  # the work starts: torch after the usage errors (issue 36)

    from host.thc.codec import InputRangeError, NonFiniteError, THCCodec
    from host.thc.lanes import LaneOverflowError
    from host.thc.simulate import allreduce

    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    codec = THCCodec(cfg)
    for path, t in zip(args.inputs, tensors, strict=True):
        try:
            codec.chunk_norms(t)
        except (NonFiniteError, InputRangeError) as exc:
            raise UsageError(f"{path}: {exc}") from exc
    try:
        res = allreduce(codec, tensors, round=args.round)
    except (NonFiniteError, InputRangeError) as exc:
        raise UsageError(f"--inputs: {exc}") from exc
    except LaneOverflowError as exc:
        raise UsageError(str(exc)) from exc
    out = res.average.numpy()
    np.save(args.output, out)
    report = {
        "workers": len(arrays),
        "shape": list(arrays[0].shape),
        "dtype": str(arrays[0].dtype),
        "nmse": nmse(out, arrays),
        "bytes_up_per_worker": res.bytes_up,
        "bytes_down_per_worker": res.bytes_down,
        "fp32_bytes": int(arrays[0].size) * 4,
        "lane_bits": res.lane_bits,
        "contributions": res.count,
        "output": args.output,
        "config": cfg.describe(),
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['workers']} workers, {arrays[0].size} elements: NMSE {report['nmse']:.5f}, "
              f"{res.bytes_up} B up / {res.bytes_down} B down per worker "
              f"(fp32: {report['fp32_bytes']} B), {res.lane_bits}-bit lanes -> {args.output}")
    return 0


def make_inputs(workers: int, elements: int, seed: int = 0) -> list[np.ndarray]:
    """``workers`` float32 arrays: a shared signal plus each worker's own noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    signal = rng.standard_normal(elements).astype(np.float32)
    return [signal + 0.5 * rng.standard_normal(elements).astype(np.float32)
            for _ in range(workers)]


def run_make_inputs(args: argparse.Namespace) -> int:
    import numpy as np

    if not 1 <= args.workers <= 256:
        raise UsageError(f"--workers {args.workers}: give 1..256")
    if args.elements < 1:
        raise UsageError(f"--elements {args.elements}: must be at least 1")
    paths = [f"{args.prefix}{r}.npy" for r in range(args.workers)]
    for p, a in zip(paths, make_inputs(args.workers, args.elements, args.seed), strict=True):
        try:
            np.save(p, a)
        except OSError as exc:
            raise UsageError(f"--prefix {args.prefix}: cannot write {p} ({exc.strerror or exc})") from None
    print(f"wrote {' '.join(paths)} ({args.elements} float32 elements each)")
    return 0


def run_table(args: argparse.Namespace) -> int:
    from host.thc.table import optimal_table, predicted_nmse, table_cost

    cfg = config_from_args(args)
    opt = optimal_table(cfg.bits, cfg.granularity, cfg.clip_mass)
    info = {
        "table": list(cfg.levels),
        "optimal": list(opt),
        "cost": table_cost(cfg.levels, cfg.granularity, cfg.clip_mass),
        "optimal_cost": table_cost(opt, cfg.granularity, cfg.clip_mass),
        "T": cfg.T,
        **{
            f"predicted_{k}": v
            for k, v in predicted_nmse(cfg.levels, cfg.granularity, cfg.clip_mass).items()
        },
    }
    if args.json:
        print(json.dumps(info))
    else:
        for k, v in info.items():
            print(f"{k:>20}: {v}")
    sys.stdout.flush()
    return 0
