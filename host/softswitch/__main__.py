"""``python -m host.softswitch ...``: the same as ``netco switch ...``."""

from __future__ import annotations

import argparse
import logging
import sys

from host.errors import UsageError
from host.softswitch import cli


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` with the ``netco switch`` arguments and run."""
    parser = argparse.ArgumentParser(prog="python -m host.softswitch",
                                     description=cli.__doc__.split("\n", 1)[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    cli.configure(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING - 10 * min(args.verbose, 2),
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"softswitch: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
