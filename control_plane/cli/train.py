"""``netco train``: train a task with N workers and a gradient compressor; compare compressors."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from host.ddp.baselines import COMPRESSORS, CompressorSpec, compare_set
from host.errors import UsageError
from host.exporter import add_metrics_arguments
from host.protocol import layout as lay
from host.protocol.jobs import lane_problem, width_problem
from host.protocol.layout import COORDS_PER_PACKET
from host.thc.lanes import LaneOverflowError, lane_bits
from host.training.names import TASK_NAMES
from host.training.report import TARGET_WINDOW, gaps, plot_comparison, summarize

if TYPE_CHECKING:  # torch and SciPy load where the work starts, not for --help (issue 36)
    from host.thc.config import THCConfig
    from host.transport.job import NetworkSpec


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Train TASK with N worker processes on this machine (gloo over loopback), averaging "
        "gradients through a DDP communication hook: THC, PyTorch's fp16 or PowerSGD hooks, or "
        "plain all-reduce. Writes a JSON report with per-step loss, held-out metric, bytes per "
        "worker and compute/communication time; --compare runs every compressor and plots them."
    )
    parser.add_argument("--task", choices=sorted(TASK_NAMES), required=True,
                        help="digits (CNN, held-out accuracy), digits-wide (5.4 M-parameter "
                        "MLP), charlm (transformer, bits/char) or charlm-ngram (5.3 M hashed "
                        "n-gram embeddings, bits/char)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--compressor", choices=COMPRESSORS, default=None,
                        help="gradient compressor (default thc); not with --compare, which runs "
                             "them all")
    parser.add_argument("--compare", action="store_true",
                        help="run none, fp16, powersgd rank 1 and 4, thc with and without error "
                        "feedback; write the comparison plot")
    parser.add_argument("--steps", type=int, help="training steps (default: the task's)")
    parser.add_argument("--eval-every", type=int, help="held-out evaluation period in steps")
    parser.add_argument("--seed", type=int, default=0, help="model, batches and compressor seed")
    parser.add_argument("--lr", type=float, help="learning rate (default: the task's)")
    parser.add_argument("--powersgd-rank", type=int, default=4, help="PowerSGD rank (default 4)")
    parser.add_argument("--no-error-feedback", action="store_true", help="THC without error feedback")
    parser.add_argument("--start-iter", type=int, default=0,
                        help="THC: uncompressed warm-up steps before compressing (default 0)")
    parser.add_argument("--granularity", type=int, default=30, help="THC g (default 30)")
    parser.add_argument("--link-mbps", type=float,
                        help="per-worker link speed in Mbit/s. With --testbed rack: the rack's "
                        "links are shaped to it and time is measured; without: an emulation "
                        "(each step costs its measured compute plus its bytes' transfer time)")
    parser.add_argument("--testbed", choices=["rack", "mininet", "buildings"],
                        help="run every worker in its own host of a testbed whose host links "
                        "are shaped to --link-mbps (tc tbf, both directions, verified); THC goes "
                        "through the switch, the baselines' gloo traffic over the same links; "
                        "wall-clock time measured. rack: namespaces, rootless when not root; "
                        "mininet: the Mininet rack (mininet/rack.yaml, 4 workers, root); "
                        "buildings: two buildings over a WAN link shaped to --link-mbps "
                        "(mininet/two_buildings.yaml, 4 workers, root); docs/testbed.md")
    parser.add_argument("--target", type=float,
                        help="held-out metric that counts as reached for time-to-target "
                        "(default: the task's, digits 0.95 accuracy, charlm 3.15 bits/char, "
                        "charlm-ngram 2.4)")
    parser.add_argument("--target-window", type=int, default=TARGET_WINDOW,
                        help="time-to-target rule, the same for every compressor: the mean of "
                        f"the last this many held-out evaluations counts (default {TARGET_WINDOW}"
                        "; 1: each evaluation alone)")
    parser.add_argument("--target-rule", choices=["held", "first"], default="held",
                        help="held (default): the target is reached at the first evaluation from "
                        "which that mean stays at or past it to the end of the run; first: the "
                        "first evaluation at which it reaches it")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP bucket size")
    net = parser.add_argument_group("in-network aggregation (THC runs only)")
    net.add_argument("--aggregator", choices=["torch", "network"], default="torch",
                     help="sum THC with torch.distributed (default) or through a switch")
    net.add_argument("--switch", default="embedded", metavar="embedded|IP:PORT[,IP:PORT...]",
                     help="'embedded' (default): start the software target on loopback and "
                          "configure it over P4Runtime; else the switch's UDP address, one per "
                          "rank or one for all")
    net.add_argument("--worker-ips", metavar="IP[,IP...]",
                     help="address each rank binds, as in the controller's file "
                          "(default 127.0.0.11, .12, ...)")
    net.add_argument("--job-id", type=int, default=1, help="THC job id at the switch (default 1)")
    net.add_argument("--slots", type=int, default=64, help="the job's slots (window; default 64)")
    net.add_argument("--policy", choices=["exact", "partial"], default="exact",
                     help="straggler policy (default exact)")
    net.add_argument("--uplink", choices=["indices", "values"], default="indices",
                     help="what DATA carries: 4-bit THC indices (default) or 8-bit table values "
                          "(needed by the Tofino program; docs/protocol.md)")
    add_metrics_arguments(net, "each worker's aggregation statistics (rank r on port N+r)")
    net.add_argument("--lane-bits", type=int, choices=[0, 8, 16, 32], default=0,
                     help="the job's result lane width, its lane_bits in the controller's file "
                          "(default 0: derived from workers x g, the controller's default)")
    net.add_argument("--coords-per-packet", type=int, default=None, metavar="W",
                     help="coordinates per packet, the switch's packet width (256, 512, 1024; "
                          "docs/protocol.md, 'Packet width'); default: the widest the job's lanes "
                          "allow on the embedded switch, 256 (what BMv2 and Tofino take) with "
                          "--switch IP:PORT")
    net.add_argument("--token", type=_token, default=None, metavar="T",
                     help="the job's token, required with --switch IP:PORT (set_job.token as the "
                          "controller installed it: `netco controller apply --json`, 'tokens'); "
                          "the embedded switch's is taken from its controller")
    net.add_argument("--worker-port", type=_worker_port, default=0, metavar="P",
                     help="the UDP port every rank binds, the job's worker_port in the "
                          "controller's file, which the switch binds each member to; with "
                          "--switch IP:PORT default 0 (an ephemeral port: for a job installed "
                          "without one); on the embedded switch default: a free port it picks")
    parser.add_argument("--out", help="JSON report path (default netco-train-TASK-RUN.json, RUN "
                        "naming the run: compare, thc, thc-network, fp16, ...: one run's report "
                        "never replaces another's; with --plot only: beside the PNG)")
    parser.add_argument("--plot", help="PNG path, written with every report (default: the "
                        "report's path with .png)")
    parser.add_argument("--json", action="store_true", help="print the JSON report to stdout")
    parser.add_argument("--no-progress", action="store_true",
                        help="no per-step progress (a bar on a terminal, plain lines otherwise)")
    parser.set_defaults(func=run)


def _validate(args: argparse.Namespace) -> THCConfig:
    for name in ("workers", "steps", "eval_every", "powersgd_rank", "target_window"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise UsageError(f"--{name.replace('_', '-')}={v}: must be >= 1")
    if args.start_iter < 0:
        raise UsageError(f"--start-iter={args.start_iter}: must be >= 0")
    if args.link_mbps is not None and not args.link_mbps > 0:
        raise UsageError(f"--link-mbps={args.link_mbps}: must be > 0 (Mbit/s per worker)")
    if args.lr is not None and not args.lr > 0:
        raise UsageError(f"--lr={args.lr}: must be > 0")
    if args.compare and args.compressor is not None:
        raise UsageError(f"--compressor {args.compressor} with --compare: --compare runs every "
                         "compressor; give one or the other")
    if args.compressor is None:
        args.compressor = "thc"
    if args.aggregator == "network" and not args.compare and args.compressor != "thc":
        raise UsageError(f"--aggregator network sums THC in the switch; --compressor "
                         f"{args.compressor} runs on torch.distributed: drop --aggregator network "
                         "or use --compressor thc")
    if args.metrics_port is not None and args.aggregator != "network":
        raise UsageError("--metrics-port: the workers' statistics come from the switch transport; "
                         "add --aggregator network")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65536 - args.workers:
        raise UsageError(f"--metrics-port={args.metrics_port}: ranks use N..N+{args.workers - 1}; "
                         f"give 0..{65536 - args.workers}")
    tb = f"--testbed {args.testbed}"
    if args.testbed and args.link_mbps is None:
        raise UsageError(f"{tb}: give --link-mbps B, the speed its links are shaped to")
    if args.testbed and args.switch != "embedded":
        raise UsageError(f"{tb} brings its own switch: drop --switch")
    if args.testbed and args.start_iter:
        raise UsageError("--start-iter: THC through the testbed's switch sums encodings only; "
                         f"use --start-iter 0 with {tb}")
    if args.testbed in ("mininet", "buildings") and args.workers != 4:
        raise UsageError(f"--workers={args.workers}: {tb} has 4 hosts; use --workers 4")
    from host.thc.config import THCConfig, THCConfigError  # SciPy: after the cheap checks

    try:
        cfg = THCConfig(granularity=args.granularity)
        lane_bits(args.workers, cfg.granularity)
    except (THCConfigError, LaneOverflowError) as exc:
        raise UsageError(str(exc)) from exc
    lane = getattr(args, "lane_bits", 0)
    if lane and (why := lane_problem(lane, args.workers, cfg.granularity)) is not None:
        raise UsageError(f"--lane-bits={why}")
    width = getattr(args, "coords_per_packet", None)
    if width is not None:
        if args.testbed:
            raise UsageError(f"--coords-per-packet: {tb} sets its switch's packet width; drop it")
        why = width_problem(width, lane or lay.lane_bits_for(args.workers, cfg.granularity))
        if why is not None:
            raise UsageError(f"--coords-per-packet {why}")
    return cfg


def run_name(args: argparse.Namespace) -> str:
    """What names one run's files: ``compare``, or the compressor's label (``thc``, ``fp16``,
    ``powersgd-r4``, ``thc-noef``), with ``-network`` when a switch sums it and ``-TESTBED`` on
    a testbed."""
    if args.compare:
        name = "compare"
    else:
        name = CompressorSpec(args.compressor or "thc", rank=args.powersgd_rank,
                              error_feedback=not args.no_error_feedback).label
        if args.aggregator == "network":
            name += "-network"
    return name + (f"-{args.testbed}" if args.testbed else "")


def report_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """(JSON report, PNG plot) of the run: ``--out`` and ``--plot``; one given, the other
    beside it with its suffix; neither, ``netco-train-TASK-RUN.json/.png`` (:func:`run_name`),
    so that runs of different compressors or aggregators never overwrite each other's files
    and a report always has the plot of the same run beside it."""
    if args.out:
        out = Path(args.out)
        return out, Path(args.plot) if args.plot else out.with_suffix(".png")
    if args.plot:
        png = Path(args.plot)
        return png.with_suffix(".json"), png
    stem = f"netco-train-{args.task}-{run_name(args)}"
    return Path(f"{stem}.json"), Path(f"{stem}.png")


def network_lines(args: argparse.Namespace, network: NetworkSpec) -> list[str]:
    """What ``--aggregator network`` says before training: the switch and where its
    statistics are served."""
    where = ("the embedded software target on loopback" if args.switch == "embedded"
             else "the switch")
    addrs = [f"{h}:{p}" for h, p in network.switch]
    if len(set(addrs)) > 1:
        addrs = [f"{a} (rank {r})" for r, a in enumerate(addrs)]
    lines = [f"netco train: THC sums through {where} at UDP {', '.join(dict.fromkeys(addrs))} (job "
             f"{network.job_id}, {args.workers} workers bound to {', '.join(network.ips)}"
             + (f", UDP port {network.worker_port}" if network.worker_port else
                ", any UDP port (no worker_port)") + ")"]
    if args.metrics_port:
        urls = [f"http://{args.metrics_address}:{args.metrics_port + r}/metrics"
                for r in range(args.workers)]
        lines.append(f"netco train: metrics of rank 0..{args.workers - 1} at " + ", ".join(urls))
    elif args.metrics_port == 0:
        lines.append(f"netco train: metrics of each rank on a free port of {args.metrics_address}"
                     " (give --metrics-port N for http://ADDRESS:N+rank/metrics)")
    else:
        lines.append("netco train: no metrics served (--metrics-port N serves rank r's at "
                     f"http://{args.metrics_address}:N+r/metrics)")
    return lines


def _print_table(summaries: dict[str, dict], gap: dict[str, dict], metric: str, link: float | None,
                 basis: str = "emulated", where: str = "namespace rack") -> None:
    from host.training.report import display_name

    names = {k: display_name(k, s.get("aggregator")) for k, s in summaries.items()}
    w = max(13, *(len(n) + 2 for n in names.values()))
    head = (f"{'compressor':<{w}}{metric:>14}{'gap':>9}{'up/fp32':>9}{'down/fp32':>10}"
            f"{'steps to target':>16}")
    if link:
        head += f"{'meas. s' if basis == 'measured' else 'emul. s':>12}"
    print(head)
    for name, s in summaries.items():
        g = gap.get(name, {}).get("metric_gap")
        line = (f"{names[name]:<{w}}{s['final_metric']:>14.4f}"
                f"{(f'{g + 0.0:+.4f}' if g is not None else '-'):>9}"
                f"{s['uplink_vs_fp32']:>9.3f}{s['downlink_vs_fp32']:>10.3f}"
                f"{(str(s['steps_to_target']) if s['steps_to_target'] else '-'):>16}")
        if link:
            t = s["time_to_target_s"]
            line += f"{(f'{t:.2f}' if t is not None else '-'):>12}"
        print(line)
    if link and basis == "measured":
        print(f"meas. s: measured wall-clock time to target, links shaped to {link:g} Mbit/s "
              f"per worker ({where})")
    elif link:
        print(f"emul. s: emulated time to target at {link:g} Mbit/s per worker (measured compute + "
              "bytes / link rate)")



def _token(text: str) -> int:
    """``--token``: an integer 1..2^32-1 (decimal or 0x hex; a job's token is never 0)."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer: give the job's token") from None
    if not 0 < value <= 0xFFFFFFFF:
        raise argparse.ArgumentTypeError(f"{value}: a job's token is 1..4294967295 (never 0): "
                                         "give the one `netco controller apply --json` printed")
    return value


def _worker_port(text: str) -> int:
    """``--worker-port``: 0 (none) or a UDP port 1..65535, as the controller's file names it."""
    if not text.isdigit() or not 0 <= int(text) <= 0xFFFF:
        raise argparse.ArgumentTypeError(f"{text!r}: give the job's worker_port from the "
                                         "controller's file (1..65535), or 0 for none")
    return int(text)


@contextlib.contextmanager
def network_for(args: argparse.Namespace, thc: THCConfig) -> Iterator[NetworkSpec | None]:
    """The THC runs' :class:`NetworkSpec` (starting the embedded target when asked), or None."""
    from host.transport.job import NetworkSpec

    if args.aggregator != "network":
        yield None
        return
    if args.switch == "embedded":
        from control_plane.embedded import EmbeddedNetwork, job_width

        lane = getattr(args, "lane_bits", 0)
        width = (getattr(args, "coords_per_packet", None)
                 or job_width(args.workers, thc.granularity, lane))
        job = {"lane_bits": lane} if lane else {}
        with EmbeddedNetwork(args.workers, job_id=args.job_id, num_slots=args.slots,
                             thc={"g": thc.granularity}, job=job, coords_per_packet=width,
                             worker_port=getattr(args, "worker_port", 0) or None) as emb:
            yield emb.network_spec(policy=args.policy, uplink=args.uplink)
        return
    switches = []
    for part in args.switch.split(","):
        host, sep, port = part.rpartition(":")
        if not sep or not port.isdigit():
            raise UsageError(f"--switch {part!r}: expected 'embedded' or IP:PORT[,IP:PORT...]")
        switches.append((host, int(port)))
    if len(switches) not in (1, args.workers):
        raise UsageError(f"--switch: {len(switches)} addresses for {args.workers} workers; give "
                         "one for all or one per rank")
    ips = (args.worker_ips.split(",") if args.worker_ips
           else [f"127.0.0.{11 + r}" for r in range(args.workers)])
    if len(ips) != args.workers:
        raise UsageError(f"--worker-ips: {len(ips)} addresses for {args.workers} workers")
    if args.token is None:
        raise UsageError("--token: give the job's token with --switch IP:PORT (the controller "
                         "drew it: `netco controller apply --json`, 'tokens')")
    yield NetworkSpec(tuple(switches), tuple(ips), job_id=args.job_id, num_slots=args.slots,
                      granularity=thc.granularity, policy=args.policy, uplink=args.uplink,
                      lane_bits=args.lane_bits, token=args.token,
                      coords_per_packet=args.coords_per_packet or COORDS_PER_PACKET,
                      worker_port=args.worker_port)


def session(network: NetworkSpec) -> NetworkSpec:
    """``network`` with a fresh round base: the switch keeps the rounds of earlier runs."""
    from host.transport.job import session_round_base

    return dataclasses.replace(network, round_base=session_round_base())


def _train_on_rack(args: argparse.Namespace, specs: list[CompressorSpec], thc: THCConfig,
                   progress: bool) -> tuple[list[dict], dict]:
    """Every spec on one shaped testbed (docs/testbed.md); (runs, testbed report)."""
    from control_plane.testbed.isolate import IsolatedError, IsolationError
    from control_plane.testbed.rackrun import run_on_rack
    from control_plane.testbed.shaping import ShapingError
    from control_plane.testbed.targets import TestbedError

    if args.testbed != "rack" and thc.granularity != 30:
        raise UsageError(f"--granularity {thc.granularity}: the {args.testbed} testbed's job runs "
                         "g = 30 (its topology file); drop --granularity or use --testbed rack")
    try:
        out = run_on_rack("train_compare", task=args.task, workers=args.workers,
                          link_mbps=args.link_mbps, specs=[dataclasses.asdict(s) for s in specs],
                          steps=args.steps, eval_every=args.eval_every, seed=args.seed,
                          lr=args.lr, bucket_cap_mb=args.bucket_cap_mb,
                          thc={"granularity": thc.granularity}, progress=progress,
                          num_slots=args.slots,
                          **({} if args.testbed == "rack" else {"testbed": args.testbed}))
    except IsolationError as exc:
        raise UsageError(f"--testbed rack: {exc}") from exc
    except TestbedError as exc:  # a Mininet testbed, built here: root, Mininet, names
        raise UsageError(f"--testbed {args.testbed}: {str(exc).splitlines()[0]}") from exc
    except ShapingError as exc:
        raise RackRunError(str(exc)) from exc
    except IsolatedError as exc:
        raise RackRunError(str(exc)) from exc
    return out["runs"], {**out["rack"], "tbf": out["tbf"]}


class RackRunError(RuntimeError):
    """A run on the namespace rack failed (the message names the run's error)."""


def run(args: argparse.Namespace) -> int:
    thc_cfg = _validate(args)
    if args.compare:
        specs = compare_set((1, 4))
    else:
        specs = [CompressorSpec(args.compressor, rank=args.powersgd_rank,
                                error_feedback=not args.no_error_feedback, start_iter=args.start_iter)]
    progress = not args.no_progress and ((not args.json) or sys.stderr.isatty())
    runs, summaries = [], {}
    basis = "measured" if args.testbed or not args.link_mbps else "emulated"
    rack = network = None
    out, png = report_paths(args)
    try:   # before minutes of training, not after them
        from host.errors import OptionError, writable_file

        writable_file(str(out), "--out")
        writable_file(str(png), "--plot")
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    # torch loads here, after every usage error (issue 36)
    from host.training.harness import TrainConfig, TrainingError, train
    from host.training.tasks import make_task

    task = make_task(args.task, seed=args.seed)
    target = args.target if args.target is not None else task.default_target
    if args.testbed:
        if args.compare:  # the comparison of docs/training.md, on the rack
            specs = [CompressorSpec("thc"), CompressorSpec("none"), CompressorSpec("fp16"),
                     CompressorSpec("powersgd", rank=args.powersgd_rank)]
        try:
            runs, rack = _train_on_rack(args, specs, thc_cfg, progress)
        except RackRunError as exc:
            print(f"netco train: failed on the rack: {exc}", file=sys.stderr)
            return 1
        for spec, r in zip(specs, runs, strict=True):
            summaries[spec.label] = summarize(r, target=target, time_basis="measured",
                                              window=args.target_window,
                                              held=args.target_rule == "held")
            summaries[spec.label]["aggregator"] = r.get("aggregator")
    else:
        with network_for(args, thc_cfg) as network:
            if network is not None:
                for line in network_lines(args, network):
                    print(line, file=sys.stderr, flush=True)
            for spec in specs:
                net = session(network) if network is not None and spec.kind == "thc" else None
                cfg = TrainConfig(task=args.task, spec=spec, workers=args.workers,
                                  steps=args.steps, eval_every=args.eval_every, seed=args.seed,
                                  lr=args.lr, thc=thc_cfg, bucket_cap_mb=args.bucket_cap_mb,
                                  progress=progress, network=net, metrics_port=args.metrics_port,
                                  metrics_address=args.metrics_address)
                try:
                    r = train(cfg)
                except TrainingError as exc:
                    print(f"netco train: {spec.label} failed: {exc}", file=sys.stderr)
                    return 1
                runs.append(r)
                summaries[spec.label] = summarize(r, target=target, link_mbps=args.link_mbps,
                                                  window=args.target_window,
                                                  held=args.target_rule == "held")
                summaries[spec.label]["aggregator"] = r.get("aggregator")
    gap = gaps(summaries, task.higher_is_better)
    report = {
        "task": args.task, "workers": args.workers, "seed": args.seed, "steps": runs[0]["steps"],
        "params": runs[0]["params"], "metric": task.metric_name,
        "higher_is_better": task.higher_is_better, "target": target,
        "target_rule": next(iter(summaries.values()))["target_rule"],
        "link_mbps": args.link_mbps,
        "time_basis": basis,
        "network": (f"{rack['kind']}, links shaped to {args.link_mbps:g} Mbit/s"
                    if args.testbed else "loopback" + (" (link time emulated)" if args.link_mbps
                                                       else "")),
        "testbed": rack,
        "bytes_model": "per worker, aggregator model: each step a worker uploads its contribution "
                       "once and downloads the aggregate once (docs/training.md)",
        "summary": summaries, "gaps_vs_none": gap, "runs": runs,
    }
    report["report_path"], report["plot_path"] = str(out), str(png)
    if network is not None and not args.testbed:
        report["switch"] = [f"{h}:{p}" for h, p in network.switch]
        report["worker_port"] = network.worker_port
    plot_comparison(runs, str(png), link_mbps=args.link_mbps, target=target, time_basis=basis,
                    summaries=summaries)
    out.write_text(json.dumps(report, indent=1))
    if args.json:
        json.dump(report, sys.stdout)
        print()
    else:
        _print_table(summaries, gap, task.metric_name, args.link_mbps, basis,
                     rack["kind"] if rack else "namespace rack")
        print(f"steps to target: {report['target_rule']} ({target:g}), every compressor alike")
        print(f"report: {out}, plot: {png}")
    return 0
