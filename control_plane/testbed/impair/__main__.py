"""``python -m control_plane.testbed.impair --a IF --b IF [...]``: run the forwarder until SIGTERM.

Examples::

    # 5 ms ± 1 ms each way, 1 % loss, 0.5 % duplicates, 2 % reordered (held 2 ms)
    python -m control_plane.testbed.impair --a imp-a --b imp-b --delay-ms 5 --jitter-ms 1 \\
        --loss-pct 1 --dup-pct 0.5 --reorder-pct 2 --seed 7 --stats-file /tmp/imp.json

On SIGTERM/SIGINT it stops, writes the counters (JSON) to ``--stats-file`` (also every
``--stats-interval`` seconds) and exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading

from control_plane.testbed.impair.params import Impairment
from host.files import write_atomic


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m control_plane.testbed.impair",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, metavar="IF", help="first interface")
    p.add_argument("--b", required=True, metavar="IF", help="second interface")
    p.add_argument("--delay-ms", type=float, default=0.0, help="added one-way delay (ms)")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="uniform jitter ± (ms)")
    p.add_argument("--loss-pct", type=float, default=0.0, help="random loss (%%)")
    p.add_argument("--dup-pct", type=float, default=0.0, help="duplicated frames (%%)")
    p.add_argument("--reorder-pct", type=float, default=0.0, help="frames held back (%%)")
    p.add_argument("--reorder-gap-ms", type=float, default=2.0, help="extra hold of those (ms)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random decisions")
    p.add_argument("--stats-file", default=None, help="write JSON counters here")
    p.add_argument("--stats-interval", type=float, default=1.0, help="seconds between stats writes")
    p.add_argument("--ready-file", default=None, help="created once both sockets are open")
    p.add_argument("-v", "--verbose", action="count", default=0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING - 10 * min(args.verbose, 2),
                        format="%(levelname)s %(name)s: %(message)s")
    from control_plane.testbed.impair.forwarder import Forwarder

    try:
        imp = Impairment(delay_ms=args.delay_ms, jitter_ms=args.jitter_ms, loss_pct=args.loss_pct,
                         dup_pct=args.dup_pct, reorder_pct=args.reorder_pct,
                         reorder_gap_ms=args.reorder_gap_ms, seed=args.seed)
    except ValueError as exc:
        print(f"impair: error: {exc}", file=sys.stderr)
        return 2
    try:
        fwd = Forwarder(args.a, args.b, imp)
    except OSError as exc:
        print(f"impair: error: cannot open {args.a}/{args.b}: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: fwd.stop_event.set())
    signal.signal(signal.SIGINT, lambda *_: fwd.stop_event.set())
    if args.stats_file:
        def report() -> None:
            while not fwd.stop_event.wait(args.stats_interval):
                write_atomic(args.stats_file, json.dumps(fwd.stats()))
        threading.Thread(target=report, daemon=True).start()
    if args.ready_file:
        write_atomic(args.ready_file, f"{os.getpid()}\n")
    try:
        fwd.run()
    finally:
        if args.stats_file:
            write_atomic(args.stats_file, json.dumps(fwd.stats()))
        fwd.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
