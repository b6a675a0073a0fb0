"""``netco demo``: the main job, measured over shaped links (no switch hardware, no BMv2, no root).

Builds a rack of network namespaces (inside a user namespace when not root): a switch
namespace running the software aggregation target, configured through the controller over
P4Runtime, and one namespace per worker, every host link shaped to --link-mbps in both
directions and measured before use. Trains the ``digits-wide`` task (a 5.4 M-parameter MLP on
scikit-learn's digits: communication-bound) with four worker processes whose gradients go
THC-encoded through the switch: 4 bits per coordinate up, 8-bit integer sums down. Then trains
the same model with uncompressed all-reduce (gloo, fp32) over the same links. Prints held-out
accuracy, bytes per worker per step and the MEASURED wall-clock time to the target accuracy,
and writes a JSON report ("time_basis": "measured") and a PNG plot.

Where namespaces cannot be made (user namespaces disabled), it says so and runs on loopback
instead, where the link time is an emulation ("time_basis": "emulated").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from host.errors import OptionError, UsageError, writable_file
from host.paths import MININET

#: --quick: few steps (for digits at a higher learning rate), so a short run still shows learning.
QUICK_STEPS = {"digits": 40, "digits-wide": 20}
QUICK_LR = {"digits": 0.2, "digits-wide": None}
#: The runs' names in the table and the plot's legend.
LABELS = {"thc": "THC via switch", "none": "fp32 all-reduce"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--task", choices=["digits-wide", "digits"], default="digits-wide",
                        help="digits-wide (default; 5.4 M-parameter MLP, communication-bound) or "
                             "digits (38 k-parameter CNN)")
    parser.add_argument("--steps", type=int, help="training steps (default: the task's)")
    parser.add_argument("--quick", action="store_true",
                        help="a short run: digits-wide 20 steps; digits 40 steps at learning rate "
                             "0.2 (about 0.85-0.9 accuracy; the full run about 0.97)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the model, the batches and THC's randomness (default 0)")
    parser.add_argument("--link-mbps", type=float, default=100.0,
                        help="speed of every host link in Mbit/s, both directions (default 100): "
                             "shaped and measured on the namespace rack; on loopback an emulation")
    parser.add_argument("--out", default="netco-demo.json", help="JSON report (default %(default)s)")
    parser.add_argument("--plot", default="netco-demo.png", help="PNG plot (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the JSON report to stdout")
    parser.add_argument("--no-progress", action="store_true",
                        help="no per-step progress (a bar on a terminal, plain lines otherwise)")
    parser.add_argument("--testbed", choices=["auto", "rack", "loopback", "mininet"], default="auto",
                        help="auto (default): the namespace rack if namespaces can be made here, "
                             "else loopback; rack: the shaped namespace rack (rootless; time "
                             "measured); loopback: the software switch on 127.0.0.1 (time "
                             "emulated); mininet: the Mininet rack (mininet/rack.yaml; root and "
                             "Mininet; 4 workers; host links shaped and verified, workers in the "
                             "Mininet hosts, time measured)")
    parser.add_argument("--switch", choices=["auto", "bmv2", "softswitch"], default="auto",
                        help="with --testbed mininet: the switch program (auto: BMv2 when installed)")
    parser.set_defaults(func=run)


@contextlib.contextmanager
def _network(args: argparse.Namespace, mode: str, say: Callable[..., None]) -> Iterator[tuple]:
    """Yield (network spec of the THC run, description, status callable)."""
    from host.transport.job import session_round_base

    if mode == "loopback":
        from control_plane.embedded import EmbeddedNetwork, job_width

        with EmbeddedNetwork(args.workers, num_slots=64, worker_port=None,
                             coords_per_packet=job_width(args.workers)) as net:
            say(f"  software switch on loopback (pid {net.proc.pid}), configured over P4Runtime: "
                f"{net.updates} entries; workers bound to UDP port {net.worker_port}")
            yield (net.network_spec(round_base=session_round_base()),
                   "software switch on loopback", net.status)
        return
    raise ValueError(f"mode {mode!r}: the rack and Mininet run through run_on_rack")


def format_columns(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A table: the first column left-aligned, the others right-aligned, two spaces apart."""
    from host.columns import format_columns as columns

    return columns(header, rows)


def time_line(basis: str, link_mbps: float, where: str) -> str:
    """The line under the table saying how its times were taken (``where`` names the
    testbed; a measured one's says how its links are shaped)."""
    if basis == "measured":
        return f"time: measured wall clock, {where}"
    return f"time: EMULATED: measured compute + bytes at {link_mbps:g} Mbit/s ({where})"


def _choose_testbed(args: argparse.Namespace, say: Callable[..., None]) -> str:
    """``rack`` or ``loopback`` for ``auto`` (saying why when falling back); else as asked."""
    if args.testbed not in ("auto", "rack"):
        return args.testbed
    from control_plane.testbed.isolate import IsolationError, check_available

    try:
        check_available()
    except IsolationError as exc:
        if args.testbed == "rack":
            raise UsageError(f"--testbed rack: {exc}") from exc
        say(f"netco demo: no namespace rack here ({exc}); falling back to loopback (--testbed "
            f"loopback): the time at {args.link_mbps:g} Mbit/s is EMULATED, not measured")
        return "loopback"
    return "rack"


def _train_pair(args, mode: str, steps: int, eval_every: int, lr: float | None, progress: bool,
                say: Callable[..., None]) -> tuple[list[dict], list, str, dict | None]:
    """THC through the switch, then fp32 all-reduce: (runs, switch status, where, rack)."""
    from host.ddp.baselines import CompressorSpec
    from host.thc.config import THCConfig
    from host.training.harness import TrainConfig, train

    if mode in ("rack", "mininet"):
        from control_plane.testbed.isolate import IsolatedError, IsolationError
        from control_plane.testbed.rackrun import run_on_rack
        from control_plane.testbed.shaping import ShapingError
        from control_plane.testbed.targets import TestbedError

        kind = "a namespace rack" if mode == "rack" else "a Mininet rack (mininet/rack.yaml)"
        say(f"  building {kind}: {args.workers} hosts, links shaped to "
            f"{args.link_mbps:g} Mbit/s; THC through the switch, then fp32 all-reduce ...")
        where = {} if mode == "rack" else {"testbed": "mininet", "target": args.switch}
        try:
            if mode == "mininet":  # the choice named by this command's flag
                from control_plane.config import load_config
                from control_plane.testbed.targets import choose_target

                choose_target(args.switch, load_config(MININET / "rack.yaml").controller.bmv2_json,
                              flag="--switch")
            out = run_on_rack("train_compare", task=args.task, workers=args.workers,
                              link_mbps=args.link_mbps,
                              specs=[{"kind": "thc"}, {"kind": "none"}], steps=steps,
                              eval_every=eval_every, seed=args.seed, lr=lr, progress=progress,
                              **where)
        except TestbedError as exc:
            raise UsageError(f"--testbed mininet: {str(exc).splitlines()[0]}") from None
        except IsolationError as exc:   # checked before (_choose_testbed); the job's own check
            raise UsageError(f"--testbed rack: {exc}; --testbed loopback runs without "
                             "namespaces (time emulated)") from None
        except (IsolatedError, ShapingError) as exc:
            raise DemoError(str(exc)) from exc
        rack = {**out["rack"], "tbf": out["tbf"]}
        who = ("rootless" if rack["rootless"] else "root") if mode == "rack" else rack["target"]
        return (out["runs"], out["switch"],
                f"{rack['kind']} ({who}), links shaped to {args.link_mbps:g} Mbit/s", rack)
    with _network(args, mode, say) as (spec, where, status):
        runs = []
        say(f"  training with THC through the switch ({where}) ...")
        runs.append(train(TrainConfig(task=args.task, spec=CompressorSpec("thc"),
                                      workers=args.workers, steps=steps, eval_every=eval_every,
                                      seed=args.seed, lr=lr, thc=THCConfig(), progress=progress,
                                      network=spec)))
        say("  training with uncompressed all-reduce (fp32, torch.distributed) ...")
        runs.append(train(TrainConfig(task=args.task, spec=CompressorSpec("none"),
                                      workers=args.workers, steps=steps, eval_every=eval_every,
                                      seed=args.seed, lr=lr, progress=progress)))
        switch_status = [s.to_json() for s in status()]
    return runs, switch_status, where, None


class DemoError(RuntimeError):
    """Training failed (the message holds every rank's error)."""


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.workers <= 8:
        raise UsageError(f"--workers={args.workers}: the demo runs 1..8 workers (8-bit lanes)")
    if not args.link_mbps > 0:
        raise UsageError(f"--link-mbps={args.link_mbps}: must be > 0 (Mbit/s per host link)")
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps={args.steps}: must be >= 1")
    if args.switch != "auto" and args.testbed != "mininet":
        raise UsageError(f"--switch {args.switch} picks the switch of a testbed; add --testbed "
                         "mininet (root, Mininet), or leave --switch out")
    if args.testbed == "mininet" and args.workers != 4:
        raise UsageError(f"--workers={args.workers}: the Mininet rack has 4 hosts; use --workers 4")
    if args.quick and args.steps is not None:
        raise UsageError("--quick sets the steps; give --quick or --steps N")
    try:   # before minutes of training, not after them
        writable_file(args.out, "--out")
        writable_file(args.plot, "--plot")
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    # torch loads here, after every usage error (issue 36)
    from host.training.harness import TrainingError
    from host.training.report import TARGET_WINDOW, plot_comparison, summarize
    from host.training.tasks import make_task

    task = make_task(args.task, seed=args.seed)
    steps = (QUICK_STEPS[args.task] if args.quick else args.steps) or task.default_steps
    lr = QUICK_LR[args.task] if args.quick else None
    eval_every = max(1, min(task.default_eval_every, steps // 4))
    progress = not args.no_progress and (not args.json or sys.stderr.isatty())
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    mode = _choose_testbed(args, say)
    basis = "measured" if mode in ("rack", "mininet") else "emulated"
    say(f"netco demo: {args.task}, {args.workers} workers, {steps} steps")
    t0 = time.perf_counter()
    try:
        runs, switch_status, where, rack = _train_pair(args, mode, steps, eval_every, lr, progress,
                                                       say)
    except (TrainingError, DemoError) as exc:
        print(f"netco demo: training failed: {exc}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - t0
    target = task.default_target
    summaries = {r["compressor"]: summarize(r, target=target, time_basis=basis,
                                            window=TARGET_WINDOW, held=True,
                                            link_mbps=None if basis == "measured" else args.link_mbps)
                 for r in runs}
    thc_s, none_s = summaries["thc"], summaries["none"]
    tt = {k: v["time_to_target_s"] for k, v in summaries.items()}
    report = {
        "task": args.task, "workers": args.workers, "steps": steps, "seed": args.seed,
        "params": runs[0]["params"], "metric": task.metric_name, "target": target,
        "link_mbps": args.link_mbps, "time_basis": basis, "testbed": mode, "rack": rack,
        "time_to_target_s": tt,
        "speedup_to_target": (tt["none"] / tt["thc"] if tt["thc"] and tt["none"] else None),
        "summary": summaries, "switch": switch_status, "elapsed_s": elapsed, "runs": runs,
        "network_stats": runs[0].get("network_stats"), "network": where,
    }
    Path(args.out).write_text(json.dumps(report, indent=1))
    plot_comparison(runs, args.plot, link_mbps=args.link_mbps, target=target, labels=LABELS,
                    time_basis=basis, summaries=summaries, speedup=("thc", "none"))
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "runs"}))
        return 0
    p = runs[0]["params"]

    def sec(v: float | None) -> str:
        return f"{v:.1f}" if v is not None else "not reached"

    rows = [
        ("held-out accuracy", f"{thc_s['final_metric']:.4f}", f"{none_s['final_metric']:.4f}"),
        ("bytes up / worker / step", f"{thc_s['bytes_sent_per_step']:,.0f}",
         f"{none_s['bytes_sent_per_step']:,.0f}"),
        ("bytes down / worker / step", f"{thc_s['bytes_received_per_step']:,.0f}",
         f"{none_s['bytes_received_per_step']:,.0f}"),
        ("bits / coordinate up", f"{8 * thc_s['bytes_sent_per_step'] / p:.2f}",
         f"{8 * none_s['bytes_sent_per_step'] / p:.2f}"),
        (f"time to {target:g} accuracy (s, {basis})", sec(tt["thc"]), sec(tt["none"])),
        (f"speedup to {target:g} accuracy", *((f"{report['speedup_to_target']:.1f}x", "1x")
                                              if report["speedup_to_target"] else ("-", "-"))),
        (f"time, all {steps} steps (s, {basis})", f"{thc_s['time_s']:.1f}",
         f"{none_s['time_s']:.1f}"),
    ]
    print()
    print(format_columns(("", LABELS["thc"], LABELS["none"]), rows))
    print()
    print(time_line(basis, args.link_mbps, where))
    print(f"report: {args.out}, plot: {args.plot}   ({elapsed:.0f} s in all)")
    return 0
