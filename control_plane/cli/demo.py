"""``netco demo``: the main job on the embedded default (no switch hardware, no BMv2, no root).

Starts the software aggregation target on loopback, configures it through the controller over
P4Runtime, and trains the ``digits`` task (a small CNN on scikit-learn's digits) with four
worker processes whose gradients go THC-encoded through the target: 4 bits per coordinate up,
8-bit integer sums down, summed by the switch. Then trains the same model with uncompressed
all-reduce (``torch.distributed``, fp32) for comparison. Prints a summary — held-out accuracy,
bytes on the wire per worker per step, time — and writes a JSON report and a PNG plot.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from host.errors import UsageError
from host.paths import MININET

#: --quick: few steps at a higher learning rate, so that a short run still shows learning.
QUICK_STEPS, QUICK_LR = 40, 0.2
#: The runs' names in the table and the plot's legend.
LABELS = {"thc": "THC via switch", "none": "fp32 all-reduce"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--steps", type=int, help="training steps (default: the task's, 150)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a short run: {QUICK_STEPS} steps at learning rate {QUICK_LR} "
                             "(reaches about 0.85-0.9 accuracy; the full run about 0.97)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the model, the batches and THC's randomness (default 0)")
    parser.add_argument("--link-mbps", type=float, default=100.0,
                        help="also report the time the bytes would take on links of this speed "
                             "(an emulation; default 100 Mbit/s per worker)")
    parser.add_argument("--out", default="netco-demo.json", help="JSON report (default %(default)s)")
    parser.add_argument("--plot", default="netco-demo.png", help="PNG plot (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the JSON report to stdout")
    parser.add_argument("--no-progress", action="store_true",
                        help="no per-step progress (a bar on a terminal, plain lines otherwise)")
    parser.add_argument("--testbed", choices=["rack"],
                        help="instead of loopback: a Mininet rack (mininet/rack.yaml: 4 hosts, "
                             "one switch; needs root and Mininet); THC frames leave and enter "
                             "through the hosts' interfaces")
    parser.add_argument("--switch", choices=["auto", "bmv2", "softswitch"], default="auto",
                        help="with --testbed: the switch program (auto: BMv2 when installed)")
    parser.set_defaults(func=run)


@contextlib.contextmanager
def _network(args: argparse.Namespace, say: Callable[..., None]) -> Iterator[tuple]:
    """Yield (network spec of the THC run, description, status callable)."""
    from host.transport.job import NetworkSpec, RawNetworkSpec, session_round_base

    if args.testbed is None:
        from control_plane.embedded import EmbeddedNetwork

        with EmbeddedNetwork(args.workers, num_slots=64) as net:
            say(f"  software switch on loopback (pid {net.proc.pid}), configured over P4Runtime: "
                f"{net.updates} entries")
            addrs = [net.address(r) for r in range(args.workers)]
            yield (NetworkSpec(tuple(a.switch for a in addrs), tuple(a.ip for a in addrs),
                               job_id=net.job_id, num_slots=net.num_slots,
                               round_base=session_round_base()),
                   "software switch on loopback", net.status)
        return
    if os.geteuid() != 0:
        raise UsageError("--testbed rack needs root (network namespaces, raw sockets)")
    from control_plane.config import load_config
    from control_plane.testbed.net import Testbed
    from control_plane.testbed.targets import TestbedError, choose_target

    topo = MININET / "rack.yaml"
    try:
        choose_target(args.switch, load_config(topo).controller.bmv2_json, flag="--switch")
        tb = Testbed(topo, target=args.switch)
        rep = tb.up()
    except TestbedError as exc:
        raise UsageError(f"--testbed rack: {exc}") from None
    try:
        jb = tb.job()
        if len(jb.members) != args.workers:
            raise UsageError(f"--testbed rack has {len(jb.members)} hosts; use --workers "
                             f"{len(jb.members)}")
        hosts = [tb.plan.host(h) for h in jb.members]
        say(f"  Mininet rack up ({rep['target']}: {rep['target_reason']}), configured over "
            "P4Runtime")
        spec = RawNetworkSpec(tuple(tb.node_pid(h.name) for h in hosts),
                              tuple(h.ifname for h in hosts), tuple(h.mac for h in hosts),
                              tuple(h.ip for h in hosts), tuple(h.gateway_mac for h in hosts),
                              tuple(h.gateway_ip for h in hosts), job_id=jb.id,
                              num_slots=jb.num_slots, granularity=jb.thc.g,
                              round_base=session_round_base(), lane_bits=jb.lane_bits)
        yield spec, f"Mininet rack, {rep['target']}", lambda: []
    finally:
        tb.down()


def format_columns(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A table: the first column left-aligned, the others right-aligned, two spaces apart."""
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join([r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))])
        for r in cells)


def run(args: argparse.Namespace) -> int:
    from host.ddp.baselines import CompressorSpec
    from host.thc.config import THCConfig
    from host.training.harness import TrainConfig, TrainingError, train
    from host.training.report import plot_comparison, summarize
    from host.training.tasks import make_task
    if not 1 <= args.workers <= 8:
        raise UsageError(f"--workers={args.workers}: the demo runs 1..8 workers (8-bit lanes)")
    if args.switch != "auto" and args.testbed is None:
        raise UsageError(f"--switch {args.switch} picks the switch of a testbed; add --testbed rack "
                         "(root, Mininet), or leave --switch out for the software switch on loopback")
    if args.quick and args.steps is not None:
        raise UsageError("--quick sets the steps; give --quick or --steps N")
    steps = QUICK_STEPS if args.quick else args.steps
    lr = QUICK_LR if args.quick else None
    task = make_task("digits", seed=args.seed)
    steps = steps or task.default_steps
    eval_every = max(1, min(task.default_eval_every, steps // 4))
    thc = THCConfig()
    progress = not args.no_progress and (not args.json or sys.stderr.isatty())
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    say(f"netco demo: digits, {args.workers} workers, {steps} steps")
    t0 = time.perf_counter()
    with _network(args, say) as (spec, where, status):
        runs = []
        try:
            say(f"  training with THC through the switch ({where}) ...")
            runs.append(train(TrainConfig(task="digits", spec=CompressorSpec("thc"),
                                          workers=args.workers, steps=steps, eval_every=eval_every,
                                          seed=args.seed, lr=lr, thc=thc, progress=progress,
                                          network=spec)))
            say("  training with uncompressed all-reduce (fp32, torch.distributed) ...")
            runs.append(train(TrainConfig(task="digits", spec=CompressorSpec("none"),
                                          workers=args.workers, steps=steps, eval_every=eval_every,
                                          seed=args.seed, lr=lr, progress=progress)))
        except TrainingError as exc:
            print(f"netco demo: training failed: {exc}", file=sys.stderr)
            return 1
        switch_status = [s.to_json() for s in status()]
    elapsed = time.perf_counter() - t0
    summaries = {r["compressor"]: summarize(r, target=task.default_target, link_mbps=args.link_mbps)
                 for r in runs}
    thc_s, none_s = summaries["thc"], summaries["none"]
    report = {
        "task": "digits", "workers": args.workers, "steps": steps, "seed": args.seed,
        "params": runs[0]["params"], "metric": task.metric_name, "link_mbps": args.link_mbps,
        "summary": summaries, "switch": switch_status, "elapsed_s": elapsed, "runs": runs,
        "network_stats": runs[0].get("network_stats"), "network": where,
    }
    Path(args.out).write_text(json.dumps(report, indent=1))
    plot_comparison(runs, args.plot, link_mbps=args.link_mbps, target=task.default_target,
                    labels=LABELS)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "runs"}))
        return 0
    p = runs[0]["params"]
    rows = [
        ("held-out accuracy", f"{thc_s['final_metric']:.4f}", f"{none_s['final_metric']:.4f}"),
        ("bytes up / worker / step", f"{thc_s['bytes_sent_per_step']:,.0f}",
         f"{none_s['bytes_sent_per_step']:,.0f}"),
        ("bytes down / worker / step", f"{thc_s['bytes_received_per_step']:,.0f}",
         f"{none_s['bytes_received_per_step']:,.0f}"),
        ("bits / coordinate up", f"{8 * thc_s['bytes_sent_per_step'] / p:.2f}",
         f"{8 * none_s['bytes_sent_per_step'] / p:.2f}"),
        ("wall time (s)", f"{thc_s['wall_s']:.1f}", f"{none_s['wall_s']:.1f}"),
    ]
    if args.link_mbps:
        rows.append((f"time at {args.link_mbps:g} Mbit/s (s)", f"{thc_s['emulated_s']:.1f}",
                     f"{none_s['emulated_s']:.1f}"))
    print()
    print(format_columns(("", LABELS["thc"], LABELS["none"]), rows))
    print(f"\nreport: {args.out}, plot: {args.plot}   ({elapsed:.0f} s in all)")
    return 0
