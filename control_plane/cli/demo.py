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


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--steps", type=int, help="training steps (default: the task's, 150)")
    parser.add_argument("--quick", action="store_true", help="a short run (20 steps), e.g. for tests")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--link-mbps", type=float, default=100.0,
                        help="also report the time the bytes would take on links of this speed "
                             "(an emulation; default 100 Mbit/s per worker)")
    parser.add_argument("--out", default="netco-demo.json", help="JSON report (default %(default)s)")
    parser.add_argument("--plot", default="netco-demo.png", help="PNG plot (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the JSON report to stdout")
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
    from control_plane.testbed.net import Testbed

    tb = Testbed(Path(__file__).resolve().parents[2] / "mininet" / "rack.yaml", target=args.switch)
    rep = tb.up()
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


def run(args: argparse.Namespace) -> int:
    from host.ddp.baselines import CompressorSpec
    from host.thc.config import THCConfig
    from host.training.harness import TrainConfig, TrainingError, train
    from host.training.report import plot_comparison, summarize
    from host.training.tasks import make_task
    if not 1 <= args.workers <= 8:
        raise UsageError(f"--workers={args.workers}: the demo runs 1..8 workers (8-bit lanes)")
    steps = 20 if args.quick else args.steps
    task = make_task("digits", seed=args.seed)
    steps = steps or task.default_steps
    eval_every = max(1, min(task.default_eval_every, steps // 4))
    thc = THCConfig()
    progress = not args.json or sys.stderr.isatty()
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    say(f"netco demo: digits, {args.workers} workers, {steps} steps")
    t0 = time.perf_counter()
    with _network(args, say) as (spec, where, status):
        runs = []
        try:
            say(f"  training with THC through the switch ({where}) ...")
            runs.append(train(TrainConfig(task="digits", spec=CompressorSpec("thc"),
                                          workers=args.workers, steps=steps, eval_every=eval_every,
                                          seed=args.seed, thc=thc, progress=progress,
                                          network=spec)))
            say("  training with uncompressed all-reduce (fp32, torch.distributed) ...")
            runs.append(train(TrainConfig(task="digits", spec=CompressorSpec("none"),
                                          workers=args.workers, steps=steps, eval_every=eval_every,
                                          seed=args.seed, progress=progress)))
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
    plot_comparison(runs, args.plot, link_mbps=args.link_mbps, target=task.default_target)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "runs"}))
        return 0
    p = runs[0]["params"]
    print()
    print(f"{'':24}{'THC via switch':>16}{'fp32 all-reduce':>17}")
    print(f"{'held-out accuracy':24}{thc_s['final_metric']:>16.4f}{none_s['final_metric']:>17.4f}")
    print(f"{'bytes up / worker / step':24}{thc_s['bytes_sent_per_step']:>16,.0f}"
          f"{none_s['bytes_sent_per_step']:>17,.0f}")
    print(f"{'bytes down / worker / step':24}{thc_s['bytes_received_per_step']:>16,.0f}"
          f"{none_s['bytes_received_per_step']:>17,.0f}")
    print(f"{'bits / coordinate up':24}{8 * thc_s['bytes_sent_per_step'] / p:>16.2f}"
          f"{8 * none_s['bytes_sent_per_step'] / p:>17.2f}")
    print(f"{'wall time (s)':24}{thc_s['wall_s']:>16.1f}{none_s['wall_s']:>17.1f}")
    if args.link_mbps:
        print(f"{f'time at {args.link_mbps:g} Mbit/s (s)':24}{thc_s['emulated_s']:>16.1f}"
              f"{none_s['emulated_s']:>17.1f}")
    print(f"\nreport: {args.out}, plot: {args.plot}   ({elapsed:.0f} s in all)")
    return 0
