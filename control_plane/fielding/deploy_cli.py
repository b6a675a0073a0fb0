"""``netco fielding deploy``: FIELDING on Flower's deployment engine, optionally in-network.

``netco fielding deploy [--clients N] [--rounds R] [--scenario S] [--seed S] [--in-network]
[--workdir DIR] [--json]`` starts a SuperLink and N SuperNodes with Flower's own CLI (and a
software switch with ``--in-network``), submits ``examples/fielding_flower`` with ``flwr run``,
prints accuracy, clusters, clients trained and the bytes of the train replies the ServerApp
received per round, and ends every process it started. Options are checked before Flower loads.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

SCENARIOS = ("label", "feature", "concept")


def configure_deploy(sub) -> None:
    """Add the ``deploy`` subcommand to ``netco fielding``'s subparsers."""
    p = sub.add_parser(
        "deploy", help="run FIELDING on Flower's deployment engine (SuperLink + SuperNodes)",
        description="Start a Flower SuperLink and one SuperNode per client as separate "
        "processes (flower-superlink, flower-supernode), run the FIELDING ServerApp/ClientApp "
        "of examples/fielding_flower with `flwr run`, print the result and stop them. "
        "--in-network adds a software switch: each cluster's updates are summed by its THC "
        "job there and the server receives one sum per cluster.")
    p.add_argument("--clients", type=int, default=8,
                   help="SuperNodes, one data partition each, 8..60 (default 8)")
    p.add_argument("--rounds", type=int, default=3,
                   help="federated rounds, at least 3 so that both drift events happen "
                   "(default 3)")
    p.add_argument("--scenario", default="concept", choices=SCENARIOS,
                   help="kind of drift on scikit-learn's digits (default concept)")
    p.add_argument("--seed", type=int, default=0, help="seed of data and training (default 0)")
    p.add_argument("--in-network", action="store_true",
                   help="aggregate each cluster in its THC job on a software switch "
                   "(python -m host.softswitch) instead of FedAvg on the server")
    p.add_argument("--workdir", default=None, metavar="DIR",
                   help="keep the processes' logs, FLWR_HOME and the result here "
                   "(default: a temporary folder, removed)")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds to wait for the run's result (default 900)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (per-cluster models left out) instead of the table")
    p.set_defaults(func=run_deploy)


def _usage(msg: str) -> Exception:
    from host.errors import UsageError

    return UsageError(msg)


def _check(args: argparse.Namespace) -> None:
    if not 8 <= args.clients <= 60:
        raise _usage(f"--clients {args.clients}: need 8..60 (one process per SuperNode)")
    if args.rounds < 3:
        raise _usage(f"--rounds {args.rounds}: need at least 3 (the scenario's drift events "
                     "happen in rounds R//3+1 and 2R//3+1)")
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    missing = [t for t in ("flower-superlink", "flower-supernode", "flwr")
               if shutil.which(t, path=path) is None]
    if missing:
        raise _usage(f"{missing[0]} not found: install Flower (pip install 'flwr>=1.20', part of "
                     "netco's dependencies)")


def brief(result: dict) -> dict:
    """``result`` without the per-cluster model arrays of the in-network record."""
    out = dict(result)
    if "network" in out:
        out["network"] = [{**r, "clusters": {c: {"partitions": v.get("partitions"),
                                                  "weight": v.get("weight")}
                                              for c, v in r["clusters"].items()}}
                          for r in out["network"]]
    return out


def table(result: dict) -> list[str]:
    """The per-round table ``netco fielding deploy`` prints."""
    net = {r["round"]: r for r in result.get("network", [])}
    head = f"{'round':>5}  {'accuracy':>8}  {'clusters':>8}  {'trained':>7}  {'reply bytes':>11}"
    if net:
        head += f"  {'P4RT writes':>11}  jobs touched"
    lines = [head]
    for r in range(1, result["rounds"] + 1):
        line = (f"{r:5d}  {result['accuracy'][r - 1]:8.4f}  {result['clusters'][r - 1]:8d}  "
                f"{result['trained_per_round'][r - 1]:7d}  {result['train_reply_bytes'][r - 1]:11,d}")
        if r in net:
            line += f"  {net[r]['writes']:11d}  {', '.join(net[r]['touched_jobs']) or '-'}"
        lines.append(line)
    mode = ("in-network: each cluster summed by its THC job, one sum per cluster to the server"
            if result.get("in_network") else "FedAvg on the server: every client's model to it")
    lines.append(f"{result['engine']}; {mode}")
    lines.append(f"reply bytes: serialized train replies received by the ServerApp per round "
                 f"(total {sum(result['train_reply_bytes']):,d}); {result['trained_nodes']} "
                 f"clients trained")
    return lines


def run_deploy(args: argparse.Namespace) -> int:
    """Run one deployment; print the table (or JSON)."""
    _check(args)
    from control_plane.fielding.deploy import DeploymentError, deploy  # Flower: after checks

    try:
        result = deploy(args.clients, args.rounds, args.scenario, args.seed,
                        in_network=args.in_network,
                        workdir=Path(args.workdir) if args.workdir else None,
                        timeout=args.timeout)
    except DeploymentError as exc:
        print(f"netco fielding deploy: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(brief(result), indent=1))
    else:
        print("\n".join(table(result)))
    return 0
