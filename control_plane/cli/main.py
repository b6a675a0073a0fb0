"""Entry point of the ``netco`` command.

Each subcommand lives in its own module, imported only when it is run, so ``netco --help``
stays fast and a subcommand's heavy dependencies (torch, flwr, grpc) load only when needed.
A subcommand module defines ``configure(parser)``, which adds its arguments (and nested
subcommands) and sets ``parser.set_defaults(func=...)``; ``func(args)`` returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys

from host import __version__
from host.errors import UsageError

__all__ = ["SUBCOMMANDS", "UsageError", "build_parser", "main"]

#: (name, module, one-line help). Add a line here to add a subcommand.
SUBCOMMANDS: list[tuple[str, str, str]] = [
    ("demo", "control_plane.cli.demo", "run the main job on the embedded default (no switch hardware)"),
    ("thc", "host.thc.cli", "THC codec tools: round-trip your own tensors, show tables"),
    ("bench", "control_plane.cli.bench", "benchmarks that print one JSON object"),
    ("train", "control_plane.cli.train", "train a task with N workers and a gradient compressor (THC, ...)"),
    ("p4", "control_plane.cli.p4", "build the P4 programs (runs p4c when present)"),
    ("switch", "host.softswitch.cli", "run the software aggregation target (same protocol as the P4 switch)"),
    ("controller", "control_plane.cli.controller",
     "P4Runtime controller: apply, diff and show desired state"),
    ("run", "control_plane.cli.run", "apply the controller file and run a command with its job file"),
    ("testbed", "control_plane.testbed.cli", "Mininet testbeds from a topology file: up, down, status"),
    ("explore", "control_plane.scaleacross.cli", "ScaleAcross Explorer: plan training across buildings"),
    ("fielding", "control_plane.fielding.cli", "FIELDING: clustered federated learning under drift"),
    ("capture", "host.protocol.capture", "decode THC packets with tshark (live or from a pcap)"),
]


def build_parser(selected: str | None) -> argparse.ArgumentParser:
    """Build the parser, configuring only the subcommand ``selected`` in full."""
    parser = argparse.ArgumentParser(
        prog="netco",
        description="THC-compressed in-network aggregation for distributed ML.",
    )
    parser.add_argument("--version", action="version", version=f"netco {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv: debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module, help_text in SUBCOMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            importlib.import_module(module).configure(p)
            _plain_help(p, help_text)
    return parser


#: reStructuredText in docstrings reused as help: ``literal`` and :role:`target`.
_RST = re.compile(r"``(.+?)``|:(?:func|class|mod|data|attr|meth|ref|doc|obj):`~?([^`]+)`")


def _plain(text: str | None) -> str | None:
    """``text`` without reStructuredText markup (help is read on a terminal)."""
    if not text:
        return text
    text = _RST.sub(lambda m: m.group(1) or m.group(2), text)
    return text.replace("::\n", ":\n")


def _plain_help(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Plain text in ``parser``'s help and its subcommands'; a subcommand without a
    description gets its one-line help as one."""
    parser.description = _plain(parser.description or help_text)
    parser.epilog = _plain(parser.epilog)
    for action in parser._actions:
        action.help = _plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in action._choices_actions}
            for name, child in action.choices.items():
                _plain_help(child, helps.get(name, ""))


def main(argv: list[str] | None = None) -> int:
    """Run ``netco`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    names = {name for name, _, _ in SUBCOMMANDS}
    selected = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(selected if selected in names else None)
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    func = getattr(args, "func", None)
    if func is None:
        if args.command is not None:
            parser.parse_args([args.command, "--help"])
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except UsageError as exc:
        # One line per problem (a file with several problems names each on its own line).
        for line in str(exc).splitlines() or [""]:
            print(f"netco {args.command}: error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
