"""Checks of ``netco controller`` options and files, each failing with one line naming the flag.

The CLI calls :func:`check_controller_args` once, before loading anything.
"""

from __future__ import annotations

import math
from argparse import Namespace
from pathlib import Path

import finsy as fy

from host.errors import OptionError, check_options, readable_file

#: P4Runtime election ids are uint128; 0 is not a usable id for a writer.
MAX_ELECTION_ID = (1 << 128) - 1


def check_text_file(path: str, what: str) -> None:
    """``path`` exists and is UTF-8 text (a binary file is refused before any parser sees it)."""
    p = readable_file(path, what)
    try:
        p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OptionError(f"{what} {path}: not a text file (byte {exc.start} is not UTF-8); "
                          "give a .yaml, .yml or .toml desired-state file") from None
    except OSError as exc:
        raise OptionError(f"{what} {path}: cannot read it ({exc.strerror})") from None


def tls_credentials(ca: str | None, cert: str | None, key: str | None,
                    server_name: str | None = None) -> fy.GRPCCredentialsTLS | None:
    """finsy TLS credentials from ``--tls-ca/--tls-cert/--tls-key`` (None: plain text).

    ``ca`` authenticates the switches; ``cert``/``key`` are the controller's client certificate
    for switches that require one (docs/security.md).
    """
    if ca is None and cert is None and key is None:
        return None
    if ca is None:
        raise OptionError("--tls-ca: give the CA that signed the switches' certificates")
    if (cert is None) != (key is None):
        raise OptionError("--tls-cert and --tls-key: give both or neither")
    files = {"--tls-ca": ca, "--tls-cert": cert, "--tls-key": key}
    for flag, f in files.items():
        if f is not None:
            readable_file(f, flag)
    return fy.GRPCCredentialsTLS(cacert=Path(ca), cert=Path(cert) if cert else None,
                                 private_key=Path(key) if key else None,
                                 target_name_override=server_name or "")


def check_controller_args(args: Namespace, error: type[Exception] = OptionError) -> None:
    """Validate ``netco controller`` arguments; raise ``error`` with one line.

    Checks the desired-state file (and ``--plan``), ``--election-id``, ``--timeout``,
    ``--watch`` (finite), ``--dead-after`` (> 0, with ``--watch``) and the TLS files (stored
    back as ``args.tls``).
    """
    check_options(_check, args, error)


def _check(args: Namespace) -> None:
    check_text_file(args.file, "FILE")
    if getattr(args, "plan", None):
        check_text_file(args.plan, "--plan")
    eid = getattr(args, "election_id", None)
    if eid is not None and not 1 <= eid <= MAX_ELECTION_ID:
        raise OptionError(f"--election-id {eid}: P4Runtime election ids are 1..2^128-1")
    timeout = getattr(args, "timeout", None)
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise OptionError(f"--timeout {timeout}: give a number of seconds > 0")
    watch = getattr(args, "watch", None)
    if watch is not None and not math.isfinite(watch):
        raise OptionError(f"--watch {watch}: give a number of seconds >= 0")
    dead = getattr(args, "dead_after", None)
    if dead is not None and dead != 0:
        if not (math.isfinite(dead) and dead > 0):
            raise OptionError(f"--dead-after {dead}: give a number of seconds > 0")
        if not watch:
            raise OptionError("--dead-after needs --watch S (the per-rank counters are read "
                              "every round)")
    args.tls = tls_credentials(getattr(args, "tls_ca", None), getattr(args, "tls_cert", None),
                               getattr(args, "tls_key", None), getattr(args, "tls_server_name", None))


__all__ = ["MAX_ELECTION_ID", "OptionError", "check_controller_args", "check_text_file",
           "tls_credentials"]
