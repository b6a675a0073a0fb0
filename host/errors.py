"""Errors shared by the libraries and their command-line front ends, and the option checks
that raise them."""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from pathlib import Path

__all__ = ["OptionError", "UsageError", "check_options", "readable_file", "writable_file"]


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


def writable_file(path: str, flag: str) -> Path:
    """``path`` as a :class:`~pathlib.Path` of a file this process can create or overwrite.

    Checked by opening it (an existing file for appending, unchanged; a new one is created
    and removed again), so that a run does not find out only when it writes its results.

    Raises
    ------
    OptionError
        Naming ``flag`` and ``path``: a folder, no folder to hold it, or it cannot be written
        (and why).
    """
    p = Path(path)
    try:   # is_dir: a folder this user cannot enter raises PermissionError
        if p.is_dir():
            raise OptionError(f"{flag} {path}: a folder, not a file")
        if not p.parent.is_dir():
            raise OptionError(f"{flag} {path}: no folder {p.parent}")
        if p.exists():
            with p.open("ab"):
                pass
        else:
            with p.open("xb"):
                pass
            p.unlink()
    except OSError as exc:
        raise OptionError(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None
    return p
