"""Errors shared by the libraries and their command-line front ends, and the option checks
that raise them."""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from pathlib import Path

__all__ = ["OptionError", "UsageError", "check_options", "readable_file"]


class UsageError(Exception):
    """Bad input from the user: the ``netco`` entry point prints it as one line, exit code 2."""


class OptionError(ValueError):
    """A bad option or file; the message is one line naming the flag."""


def check_options(check: Callable[[Namespace], None], args: Namespace,
                  error: type[Exception] = OptionError) -> None:
    """Run ``check(args)``; an :class:`OptionError` it raises comes out as ``error`` (the same
    one line, no chained traceback), e.g. :class:`UsageError` for a command-line front end."""
    try:
        check(args)
    except OptionError as exc:
        if error is OptionError:
            raise
        raise error(str(exc)) from None


def readable_file(path: str, flag: str) -> Path:
    """``path`` as a :class:`~pathlib.Path` of a file this process can read.

    Raises
    ------
    OptionError
        Naming ``flag`` and ``path``: no such file, or it cannot be read (and why).
    """
    p = Path(path)
    if not p.is_file():
        raise OptionError(f"{flag} {path}: no such file")
    try:
        with p.open("rb"):
            pass
    except OSError as exc:
        raise OptionError(f"{flag} {path}: cannot read it ({exc.strerror})") from None
    return p
