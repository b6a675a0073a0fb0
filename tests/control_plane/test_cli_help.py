"""Every ``netco ... --help``: each option has help text, and no raw reStructuredText leaks out.

The walk builds each subcommand's real parser (the command table in
:mod:`control_plane.cli.main`, every nested subcommand) and renders its help as a user sees it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from control_plane.cli.main import SUBCOMMANDS, build_parser

#: ``like this`` (reStructuredText literals), or :func:`roles`, as they would appear in help.
RST = re.compile(r"``|:(?:func|class|mod|data|attr|meth|ref|doc):`")


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def walk() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(``netco name sub ...``, parser) for every command and nested subcommand."""
    for name, _, _ in SUBCOMMANDS:
        top = build_parser(name)
        (cmd,) = [p for n, p in _subparsers(top) if n == name]
        stack = [(f"netco {name}", cmd)]
        while stack:
            path, p = stack.pop()
            yield path, p
            stack += [(f"{path} {n}", q) for n, q in _subparsers(p)]


COMMANDS = sorted(walk(), key=lambda t: t[0])


def test_the_walk_reaches_nested_subcommands() -> None:
    names = {path for path, _ in COMMANDS}
    for expected in ("netco thc roundtrip", "netco bench codec", "netco controller status",
                     "netco testbed up", "netco fielding flower", "netco explore search",
                     "netco p4 build", "netco capture", "netco demo", "netco train", "netco switch"):
        assert expected in names


@pytest.mark.parametrize(("path", "parser"), COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_option_has_help(path: str, parser: argparse.ArgumentParser) -> None:
    missing = [a.option_strings[0] if a.option_strings else a.dest for a in parser._actions
               if not isinstance(a, argparse._SubParsersAction)
               and a.help is not argparse.SUPPRESS and not (a.help or "").strip()]
    assert not missing, f"{path}: options without help text: {', '.join(missing)}"


@pytest.mark.parametrize(("path", "parser"), COMMANDS, ids=[p for p, _ in COMMANDS])
def test_help_has_a_description_and_no_raw_markup(path: str, parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    bad = [line.strip() for line in text.splitlines() if RST.search(line)]
    assert not bad, f"{path} --help shows raw reStructuredText: {bad[0]!r}"
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                undescribed = [c.dest for c in action._choices_actions if not (c.help or "").strip()]
                assert not undescribed, f"{path}: subcommands without a description: {undescribed}"
    assert (parser.description or "").strip(), f"{path}: no description"
