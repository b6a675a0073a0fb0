"""``netco bench``: benchmarks; a readable table by default, one JSON object with --json."""

from __future__ import annotations

import argparse
import json

from host.errors import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_command", metavar="BENCHMARK", required=True)
    from host.bench import codec

    p = sub.add_parser("codec", help="THC codec throughput vs a tensor copy, NMSE vs baselines",
                       description=codec.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    codec.add_arguments(p)
    p.set_defaults(func=_run_codec)


def _run_codec(args: argparse.Namespace) -> int:
    from host.bench import codec

    problem = codec.check_arguments(args)
    if problem:
        raise UsageError(problem)
    report = codec.run(args.sizes, args.repeat, args.backend, args.nmse_elements, args.seed)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(codec.format_report(report))
    return 0
