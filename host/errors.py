"""Errors shared by the libraries and their command-line front ends."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """Bad input from the user: the ``netco`` entry point prints it as one line, exit code 2."""
