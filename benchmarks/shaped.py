"""THC through the switch against gloo on a shaped testbed; prints one JSON object.

Default testbed (``--testbed namespace``): a rack of network namespaces
(``control_plane/testbed/nsrack.py``; as an unprivileged user inside a user namespace): n
workers, each in its own host namespace, THC through the software target in the switch
namespace, gloo's TCP routed by that namespace's kernel. ``--testbed mininet``: the Mininet
rack (``mininet/rack.yaml``, root); ``--testbed buildings``: two buildings
(``mininet/two_buildings.yaml``, root; its WAN link shaped to ``--wan-mbps``, default the
host links' rate, with ``--wan-delay-ms``); on both, the worker processes run inside the
Mininet hosts, THC goes through the switch program (``--switch``) in raw frames and gloo is
routed by the switch program. On every testbed each host link is shaped with ``tc tbf`` on
both directions and measured before use (``control_plane/testbed/shaping.py``).

* ``allreduce``: one fp32 gradient of ``--elements`` (default 2^24) all-reduced by every worker:
  THC (encode, switch, decode; ``NetworkAggregator.allreduce``) against gloo's ring all-reduce
  in fp32; the slowest rank's time, median over ``--repeats``.
* ``training``: each ``--task`` (default ``digits-wide``, 5.4 M parameters; also
  ``charlm-ngram``, 5.3 M) trained once per compressor (thc through the switch, none = fp32
  DDP, fp16, powersgd-r4) with the same learning rate, batches and seed, measured wall-clock
  time of the training steps until the held-out metric reaches the task's target (the held
  rule of ``docs/training.md``: the mean of the last 3 evaluations stays past it to the end).

    .venv/bin/python benchmarks/shaped.py --json
    .venv/bin/python benchmarks/shaped.py --json --skip-training --link-mbps 100
    .venv/bin/python benchmarks/shaped.py --testbed mininet --skip-training --link-mbps 100
    .venv/bin/python benchmarks/shaped.py --skip-training --link-mbps 1000 --background compile

``--background busy|compile`` runs a load beside every measurement at nice 19
(``host/bench/background.py``); each row reports the cores it actually took (``background``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from host.bench.background import KINDS

if TYPE_CHECKING:
    from host.bench.background import Background

TRAIN_SPECS = [
    {"kind": "thc"},
    {"kind": "none"},
    {"kind": "fp16"},
    {"kind": "powersgd", "rank": 4},
]


def _label(spec: dict) -> str:
    return f"powersgd-r{spec['rank']}" if spec["kind"] == "powersgd" else spec["kind"]


def _testbed_kw(args: argparse.Namespace) -> dict:
    """What the rack jobs take for ``--testbed`` (and the Mininet testbeds' options)."""
    if args.testbed == "namespace":
        return {}
    return {"testbed": args.testbed, "target": args.switch, "wan_mbps": args.wan_mbps,
            "wan_delay_ms": args.wan_delay_ms}


def allreduce_rows(args: argparse.Namespace, bg: Background) -> list[dict]:
    from control_plane.testbed.rackrun import run_on_rack

    rows = []
    for mbps in args.link_mbps:
        print(f"all-reduce: {args.workers} workers, {args.elements} elements, {mbps:g} Mbit/s",
              file=sys.stderr)
        r = run_on_rack("allreduce_bench", workers=args.workers, link_mbps=mbps,
                        elements=args.elements, repeats=args.repeats, **_testbed_kw(args))
        rows.append({"link_mbps": mbps, "workers": args.workers, "elements": args.elements,
                     "thc_s": round(r["thc_s"], 4), "gloo_s": round(r["gloo_s"], 4),
                     "speedup": round(r["speedup"], 3),
                     "thc_codec_s": round(r["codec_s"], 4),
                     "thc_network_s": round(max(r["thc_s"] - r["codec_s"], 0.0), 4),
                     "thc_wire_s": round(8 * max(r["thc_bytes_sent"], r["thc_bytes_received"])
                                         / (mbps * 1e6), 4),
                     "gloo_wire_s": round(8 * 2 * (args.workers - 1) / args.workers * 4
                                          * args.elements / (mbps * 1e6), 4),
                     "thc_s_all": [round(t, 4) for t in r["thc_s_all"]],
                     "gloo_s_all": [round(t, 4) for t in r["gloo_s_all"]],
                     # per repeat, all ranks together: a lost window (a socket buffer that
                     # overflowed while its process waited for a core) costs a deadline
                     "thc_retransmits_per_repeat": round(sum(
                         w["retransmits"] for w in r["thc_window"]) / args.repeats, 1),
                     "thc_deadlines_per_repeat": round(sum(
                         w["deadlines"] for w in r["thc_window"]) / args.repeats, 1),
                     "thc_bytes_sent_per_worker": r["thc_bytes_sent"],
                     "thc_bytes_received_per_worker": r["thc_bytes_received"],
                     "gloo_bytes_each_way_per_worker": int(2 * (args.workers - 1) / args.workers
                                                           * 4 * args.elements),
                     "measured_link_mbps": r["rack"]["measured_mbps"],
                     "testbed": r["rack"]["kind"], "switch": r["rack"].get("target", "softswitch"),
                     "wan": r["rack"].get("wan"), "rootless": r["rack"]["rootless"],
                     "background": bg.usage()})
    return rows


def _phase_medians(run: dict) -> dict[str, float]:
    """Median over the steps of each phase of THC's hook (seconds; docs/training.md)."""
    import statistics

    phases = [r["phases"] for r in run["records"] if r.get("phases")]
    keys = sorted({k for p in phases for k in p})
    return {k: round(statistics.median(p.get(k, 0.0) for p in phases), 4) for k in keys}


def training_rows(args: argparse.Namespace, bg: Background) -> list[dict]:
    from control_plane.testbed.rackrun import run_on_rack
    from host.ddp.baselines import POWERSGD_START_ITER
    from host.thc.config import THCConfig
    from host.training.report import summarize

    rows = []
    for task, mbps in ((t, m) for t in args.task for m in args.link_mbps):
        print(f"training: {task}, {args.workers} workers, {mbps:g} Mbit/s", file=sys.stderr)
        out = run_on_rack("train_compare", task=task, workers=args.workers, link_mbps=mbps,
                          specs=TRAIN_SPECS, steps=args.steps, seed=args.seed,
                          eval_every=args.eval_every, thc={"granularity": args.granularity},
                          **_testbed_kw(args))
        runs = out["runs"]
        target = args.target if args.target is not None else runs[0]["default_target"]
        summ = {_label(s): summarize(r, target=target, time_basis="measured",
                                     window=args.target_window, held=True)
                for s, r in zip(TRAIN_SPECS, runs, strict=True)}
        thc_run = next(r for s, r in zip(TRAIN_SPECS, runs, strict=True) if s["kind"] == "thc")
        rows.append({
            "link_mbps": mbps, "task": task, "params": runs[0]["params"],
            "workers": args.workers, "steps": runs[0]["steps"], "target": target,
            "metric": runs[0]["metric_name"], "time_basis": "measured",
            "time_to_target_s": {k: (round(v["time_to_target_s"], 2)
                                     if v["time_to_target_s"] is not None else None)
                                 for k, v in summ.items()},
            "target_rule": next(iter(summ.values()))["target_rule"],
            "eval_every": runs[0]["eval_every"],
            "steps_to_target": {k: v["steps_to_target"] for k, v in summ.items()},
            "first_crossing_step": {k: v["first_crossing_step"] for k, v in summ.items()},
            "settings": {
                "same_for_all": {"lr": runs[0]["config"]["lr"] or "task default",
                                 "batch_per_worker": "task default", "bucket_cap_mb": 25.0,
                                 "seed": args.seed},
                "thc": THCConfig(granularity=args.granularity).describe()
                       | {"error_feedback": True, "through": "software target (switch namespace)"},
                "powersgd": {"hook": "torch.distributed.algorithms.ddp_comm_hooks."
                                     "powerSGD_hook.powerSGD_hook",
                             "matrix_approximation_rank": 4,
                             "start_powerSGD_iter": POWERSGD_START_ITER,
                             "use_error_feedback": True, "warm_start": True,
                             "min_compression_rate": 2, "orthogonalization_epsilon": 0},
                "fp16": "torch fp16_compress_hook", "none": "torch allreduce_hook (fp32)"},
            "thc_phase_s_median": _phase_medians(thc_run),
            "thc_cpu_s_per_step_median": round(sorted(x["cpu_s"] for x in thc_run["records"])[
                len(thc_run["records"]) // 2], 4),
            "switch_cpu_s_per_thc_step": (round(thc_run["switch_cpu_s"] / thc_run["steps"], 4)
                                          if thc_run.get("switch_cpu_s") is not None else None),
            "final_metric": {k: round(v["final_metric"], 4) for k, v in summ.items()},
            "step_s_median": {k: round(sorted(x["wall_s"] for x in r["records"])[len(r["records"]) // 2], 4)
                              for k, r in zip(summ, runs, strict=True)},
            "comm_s_per_step": {k: round(v["comm_s"] / max(1, len(r["records"])), 4)
                                for (k, v), r in zip(summ.items(), runs, strict=True)},
            "compute_s_per_step": {k: round(v["compute_s"] / max(1, len(r["records"])), 4)
                                   for (k, v), r in zip(summ.items(), runs, strict=True)},
            "bytes_received_per_step": {k: round(v["bytes_received_per_step"])
                                        for k, v in summ.items()},
            "run_elapsed_s": {k: round(r.get("elapsed_s", 0.0), 1)
                              for k, r in zip(summ, runs, strict=True)},
            "bytes_sent_per_step": {k: round(v["bytes_sent_per_step"]) for k, v in summ.items()},
            "measured_link_mbps": out["rack"]["measured_mbps"],
            "testbed": out["rack"]["kind"],
            "background": bg.usage(),
        })
    return rows


def _unavailable(args: argparse.Namespace) -> str | None:
    """Why the chosen testbed cannot be built here (one line), or None."""
    if args.testbed != "namespace":
        import os

        if os.geteuid() != 0:
            return f"--testbed {args.testbed} needs root (Mininet); --testbed namespace does not"
        if args.wan_mbps is not None and not args.wan_mbps > 0:
            return f"--wan-mbps={args.wan_mbps}: must be > 0"
        from control_plane.config import load_config
        from control_plane.testbed.mnrack import TOPOLOGIES
        from control_plane.testbed.targets import TestbedError, choose_target

        try:
            choose_target(args.switch, load_config(TOPOLOGIES[args.testbed]).controller.bmv2_json,
                          flag="--switch")
        except TestbedError as exc:
            return str(exc)
        return None
    from control_plane.testbed.isolate import IsolationError, check_available

    try:
        check_available()
    except IsolationError as exc:
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--link-mbps", type=float, nargs="+", default=[100.0, 1000.0],
                   help="shaped link rates to run (default 100 1000)")
    p.add_argument("--testbed", choices=("namespace", "mininet", "buildings"), default="namespace",
                   help="namespace (default): the rack of network namespaces (rootless); mininet: "
                        "the Mininet rack; buildings: two buildings over a WAN link (both root)")
    p.add_argument("--switch", choices=("softswitch", "bmv2"), default="softswitch",
                   help="with a Mininet testbed: the switch program (default softswitch)")
    p.add_argument("--wan-mbps", type=float,
                   help="with --testbed buildings: the WAN link's rate (default: --link-mbps)")
    p.add_argument("--wan-delay-ms", type=float, default=0.0,
                   help="with --testbed buildings: the WAN link's one-way delay (default 0)")
    p.add_argument("--workers", type=int, default=4, help="hosts of the rack (default 4; the "
                   "Mininet testbeds have 4)")
    p.add_argument("--elements", type=int, default=1 << 24, help="all-reduce size (default 2^24)")
    p.add_argument("--repeats", type=int, default=2, help="all-reduce repeats (default 2)")
    p.add_argument("--task", nargs="+", default=["digits-wide"],
                   help="training task(s) (default digits-wide; charlm-ngram: the embedding-heavy "
                   "one where a rank-4 approximation costs accuracy)")
    p.add_argument("--steps", type=int, help="training steps (default: the task's)")
    p.add_argument("--target", type=float, help="metric target (default: the task's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, help="held-out evaluation period (default: the "
                   "task's; digits-wide evaluates every step)")
    p.add_argument("--target-window", type=int, default=3,
                   help="time-to-target rule, the same for every method: first evaluation "
                   "from which the mean of the last this many evaluations stays at or past the "
                   "target to the end of the run (default 3)")
    p.add_argument("--granularity", type=int, default=30,
                   help="THC g (table values 0..g; lanes stay 8 bits while workers*g <= 255)")
    p.add_argument("--skip-allreduce", action="store_true", help="no all-reduce timings")
    p.add_argument("--skip-training", action="store_true", help="no training comparison")
    p.add_argument("--background", choices=KINDS, default="none",
                   help="load beside the measurements, every process at nice 19: none (default); "
                   "busy: spinning loops; compile: loops of cc -O2 on a generated C file (the "
                   "memory-heavy load of a build; host/bench/background.py)")
    p.add_argument("--background-procs", type=int,
                   help="processes of --background load (default: one per CPU)")
    p.add_argument("--json", action="store_true", help="print only the JSON object (default too)")
    args = p.parse_args(argv)
    if args.background_procs is not None and args.background_procs < 1:
        p.error(f"--background-procs={args.background_procs}: must be >= 1")
    problem = _unavailable(args)
    if problem:
        print(f"shaped: {problem}", file=sys.stderr)
        return 2
    from control_plane.testbed.impair.params import ImpairmentError
    from control_plane.testbed.shaping import ShapingError
    from control_plane.testbed.targets import TestbedError
    from host.bench.background import start
    from host.tools import MissingToolError

    try:
        bg = start(args.background, args.background_procs)
    except MissingToolError as exc:
        print(f"shaped: --background {args.background}: {exc}", file=sys.stderr)
        return 2
    try:
        out = {"allreduce": [] if args.skip_allreduce else allreduce_rows(args, bg),
               "training": [] if args.skip_training else training_rows(args, bg),
               "background": bg.usage()}
    except (TestbedError, ShapingError, ImpairmentError) as exc:  # the testbed, not the run
        print(f"shaped: --testbed {args.testbed}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        bg.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
