"""``netco fielding``: compare FIELDING with baselines on offline drift scenarios.

``netco fielding run --scenario label|feature|concept|all [--dataset digits|mnist1d|synthetic]
[--clients N --rounds R --seed S] [--json] [--plot [PNG]]``

``netco fielding flower [--clients N --rounds R]``: the same clustering as a Flower strategy,
driven by Flower's own ``Strategy.start`` loop with real ``ClientApp`` objects.

``netco fielding deploy [--clients N --rounds R] [--in-network]``: the same on Flower's
deployment engine (SuperLink and SuperNodes as separate processes; :mod:`.deploy_cli`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from control_plane.fielding.config import METHODS, ConfigError, FieldingConfig, is_method

#: Default target accuracy per dataset (softmax regression tops out near 0.95 on digits and
#: 0.78 on the synthetic mixture).
DEFAULT_TARGETS = {"digits": 0.9, "mnist1d": 0.6, "synthetic": 0.7}


def _usage(msg: str) -> Exception:
    from host.errors import UsageError

    return UsageError(msg)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``run`` and ``flower`` subcommands."""
    sub = parser.add_subparsers(dest="fielding_command", metavar="ACTION")
    run_p = sub.add_parser("run", help="run FIELDING and the baselines on a drift scenario",
                           description="Run FIELDING, FedAvg, IFCA, CFL, FedDrift and an oracle "
                           "on an offline drift scenario; print a table or --json.")
    run_p.add_argument("--scenario", required=True,
                       choices=("label", "feature", "concept", "all"),
                       help="kind of drift (all: the three in turn)")
    run_p.add_argument("--dataset", default="digits", choices=("digits", "mnist1d", "synthetic"),
                       help="scikit-learn digits (8x8), MNIST-1D (the mnist1d package, built "
                       "offline; harder: use --hidden 64 --lr 0.1) or a synthetic Gaussian "
                       "mixture")
    run_p.add_argument("--clients", type=int, default=40,
                       help="number of clients, 8..1000 (default 40; the scenarios are designed "
                       "for 20-200)")
    run_p.add_argument("--rounds", type=int, default=30, help="federated rounds (default 30)")
    run_p.add_argument("--seed", type=int, default=0, help="seed of data and training")
    run_p.add_argument("--methods", default="fielding,fedavg,ifca,cfl,feddrift,oracle",
                       help="comma-separated subset of the methods")
    run_p.add_argument("--target", type=float, default=None,
                       help="target accuracy for rounds-to-target (default: 0.9 on digits, "
                       "0.7 on synthetic)")
    run_p.add_argument("--hidden", type=int, default=0,
                       help="hidden units of the model (0: softmax regression)")
    run_p.add_argument("--local-epochs", type=int, default=3, help="local SGD epochs")
    run_p.add_argument("--lr", type=float, default=0.5, help="local SGD learning rate")
    d = FieldingConfig()
    run_p.add_argument("--tau", type=float, default=d.tau, help="drift threshold (L1)")
    run_p.add_argument("--theta", type=float, default=d.theta,
                       help="re-cluster when more than this fraction drifted")
    run_p.add_argument("--epsilon", type=float, default=d.epsilon,
                       help="re-cluster when cost after migration > (1+eps) x fresh")
    run_p.add_argument("--k-max", type=int, default=d.k_max, help="largest K for silhouette")
    run_p.add_argument("--representation", default=d.representation,
                       choices=("hist", "hist+embed"), help="client representation")
    run_p.add_argument("--embed-map", default=d.embed_map, choices=("linear", "conv1d"),
                       help="sketch of the inputs in hist+embed: random projection (linear) or "
                       "max-pooled random 1-D filters (conv1d; use it on mnist1d)")
    run_p.add_argument("--init-policy", default=d.init_policy,
                       choices=("nearest-centre", "max-overlap", "fresh"),
                       help="model of a new cluster after re-clustering")
    run_p.add_argument("--feddrift-delta", type=float, default=0.3, help="FedDrift delta")
    run_p.add_argument("--ifca-k", type=int, default=4,
                       help="IFCA's number of models, fixed a priori (never the scenario's "
                       "number of groups; sweep with --methods ifca-k2,ifca-k4,ifca-k8)")
    run_p.add_argument("--cfl-eps", type=float, nargs=2, default=(0.4, 1.6),
                       metavar=("EPS1", "EPS2"), help="CFL split thresholds")
    run_p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    run_p.add_argument("--plot", nargs="?", const="", default=None, metavar="PNG",
                       help="write accuracy-over-rounds PNG (default fielding-<scenario>.png)")
    run_p.add_argument("--no-progress", action="store_true",
                       help="no progress bar (when stderr is not a terminal there is none anyway)")
    run_p.set_defaults(func=run)

    fl = sub.add_parser("flower", help="run the FIELDING Flower strategy end to end",
                        description="Drive FieldingStrategy with Flower's Strategy.start loop "
                        "over an in-process Grid and real ClientApp objects.")
    fl.add_argument("--scenario", default="concept", choices=("label", "feature", "concept"),
                    help="kind of drift (default concept)")
    fl.add_argument("--clients", type=int, default=20,
                    help="number of clients, at least 8 (default 20)")
    fl.add_argument("--rounds", type=int, default=12,
                    help="federated rounds, at least 3 (default 12)")
    fl.add_argument("--seed", type=int, default=0, help="seed of data and training (default 0)")
    fl.add_argument("--engine", default="local", choices=("local", "simulation"),
                    help="local: Strategy.start over an in-process grid; simulation: "
                    "Flower's simulation engine (needs Ray)")
    fl.add_argument("--json", action="store_true", help="print one JSON object")
    fl.set_defaults(func=run_flower)

    from control_plane.fielding.deploy_cli import configure_deploy

    configure_deploy(sub)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _fielding_config(args: argparse.Namespace) -> FieldingConfig:
    try:
        return FieldingConfig(tau=args.tau, theta=args.theta, epsilon=args.epsilon,
                              k_max=args.k_max, representation=args.representation,
                              embed_map=args.embed_map, init_policy=args.init_policy,
                              seed=args.seed)
    except ConfigError as exc:
        raise _usage(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    """Run the comparison; print a table (or JSON) and optionally write PNGs."""
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    bad = [m for m in methods if not is_method(m)]
    if bad or not methods:
        raise _usage(f"--methods: unknown {bad or 'empty list'}; choose from {','.join(METHODS)}"
                     " or ifca-k<K> (K 1..99), feddrift-global, feddrift-clusters")
    if not 8 <= args.clients <= 1000:
        raise _usage(f"--clients {args.clients}: use 8..1000 (the scenarios target 20-200)")
    if args.ifca_k < 1:
        raise _usage(f"--ifca-k {args.ifca_k}: must be >= 1 (try 4)")
    if args.local_epochs < 1 or args.lr <= 0 or args.hidden < 0:
        raise _usage("--local-epochs must be >= 1, --lr > 0, --hidden >= 0")
    if args.target is None:
        args.target = DEFAULT_TARGETS[args.dataset]
    if not 0 < args.target <= 1:
        raise _usage(f"--target {args.target}: an accuracy in (0, 1]")
    fcfg = _fielding_config(args)
    # scikit-learn, SciPy and matplotlib load here, after every usage error (issue 36)
    from tqdm import tqdm

    from control_plane.fielding.harness import BaselineParams, HarnessConfig, compare
    from control_plane.fielding.models import LocalTraining
    from control_plane.fielding.plot import plot_accuracy
    from control_plane.fielding.scenarios import make_scenario

    base = BaselineParams(ifca_k=args.ifca_k, feddrift_delta=args.feddrift_delta,
                          cfl_eps1=args.cfl_eps[0], cfl_eps2=args.cfl_eps[1])
    hcfg = HarnessConfig(hidden=args.hidden,
                         local=LocalTraining(epochs=args.local_epochs, lr=args.lr),
                         target=args.target)
    kinds = ("label", "feature", "concept") if args.scenario == "all" else (args.scenario,)
    results = []
    total = len(kinds) * len(methods) * args.rounds
    with tqdm(total=total, desc="fielding", disable=args.no_progress or None,
              file=sys.stderr, leave=False) as bar:
        for kind in kinds:
            try:
                scenario = make_scenario(kind, args.dataset, args.clients, args.rounds,
                                         args.seed)
            except ValueError as exc:
                raise _usage(str(exc)) from None
            res = compare(scenario, methods, fcfg, base, hcfg, progress=lambda: bar.update(1))
            if args.plot is not None:
                path = args.plot or f"fielding-{kind}.png"
                if len(kinds) > 1 and args.plot:
                    p = Path(args.plot)
                    path = str(p.with_name(f"{p.stem}-{kind}{p.suffix or '.png'}"))
                res["plot"] = str(plot_accuracy(res, path))
            results.append(res)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=1))
        return 0
    for res in results:
        _print_table(res)
    return 0


def _print_table(res: dict) -> None:
    print(f"\n{res['scenario']} drift on {res['dataset']}: {res['clients']} clients, "
          f"{res['rounds']} rounds, seed {res['seed']}, drift at rounds {res['drift_rounds']}, "
          f"target {res['target']}")
    w = max(10, *(len(n) for n in res["methods"]))
    print(f"{'method':{w}} {'final':>7} {'last3':>7} {'rounds to target':>16} {'repr B':>9} "
          f"{'updates B':>11} {'down B':>11} {'models':>6}")
    for name, m in res["methods"].items():
        b = m["bytes"]
        rtt = m["rounds_to_target"] if m["rounds_to_target"] is not None else "-"
        print(f"{name:{w}} {m['final_accuracy']:7.4f} {m['final_accuracy_mean_last']:7.4f} "
              f"{rtt!s:>16} {b['representations']:9d} {b['model_updates_up']:11d} "
              f"{b['models_down']:11d} {m['models_per_round'][-1]:6d}")
    print("final, last3: mean client test accuracy in the last round / the last three; "
          "B: bytes over the whole run, all clients; models: in the last round")
    for line in summary_lines(res):
        print(line)
    if "plot" in res:
        print(f"plot: {res['plot']}")


def summary_lines(res: dict) -> list[str]:
    """The lines under the table: FIELDING against the baseline with the best final accuracy,
    rounds to target against the baseline(s) that reached it first, each one named."""
    s = res.get("summary") or {}
    lines = []
    if "gain_pp" in s:
        best = s["best_baseline"]

        def rounds(n: int | None) -> str:
            return "never" if n is None else str(n)

        lines.append(f"FIELDING vs the best baseline by final accuracy ({best}): "
                     f"{s['gain_pp']:+.2f} percentage points (mean of the last 3 rounds)")
        fastest = s.get("fastest_baselines") or []
        line = (f"rounds to target {res['target']:g}: FIELDING {rounds(s['fielding_rounds_to_target'])}"
                f", {best} {rounds(s['best_baseline_own_rounds_to_target'])}")
        if fastest and best not in fastest:
            line += (f", fastest baseline {' and '.join(fastest)} "
                     f"{rounds(s['best_baseline_rounds_to_target'])}")
        elif not fastest:
            line += ", no baseline reached it"
        lines.append(line)
    if s.get("repr_over_updates") is not None:
        lines.append(f"FIELDING's representation bytes: {100 * s['repr_over_updates']:.2f}% of "
                     "its model-update bytes")
    if "oracle" in res["methods"]:
        from control_plane.fielding.plot import ORACLE_NOTE

        lines.append(ORACLE_NOTE)
    return lines


def run_flower(args: argparse.Namespace) -> int:
    """Run the Flower strategy end to end and print accuracy and clusters per round."""
    if args.clients < 8 or args.rounds < 3:
        raise _usage("--clients must be >= 8 and --rounds >= 3")
    from control_plane.fielding.flower import run_engine, run_local  # Flower: after the checks

    if args.engine == "local":
        out = run_local(args.scenario, args.clients, args.rounds, args.seed)
    else:
        try:
            out = run_engine(args.scenario, args.clients, args.rounds, args.seed)
        except RuntimeError as exc:
            raise _usage(str(exc)) from None
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for r, acc in enumerate(out["accuracy"], 1):
            print(f"round {r:3d}: accuracy {acc:.4f}  clusters {out['clusters'][r - 1]}")
    return 0
