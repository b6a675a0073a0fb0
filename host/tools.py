"""The external programs netco and its tests run, and where each comes from.

One table (:data:`TOOLS`) maps every binary the project or its tests shell out to onto the
Debian package that brings it (or, for what Debian does not package, how to get it).
:func:`require` raises :class:`MissingToolError` naming ``apt-get install <package>``, so a helper
that runs a missing binary says what to install instead of failing later without a reason;
the tests' ``tools`` marker (tests/conftest.py) skips with the same line.

``python -m host.tools [--missing] [BINARY ...]`` prints the Debian packages of the given
binaries (default: :data:`TEST_TOOLS`, what the test suite runs), only those not on ``PATH``
with ``--missing``, one line, for ``apt-get install``: ``./dev.sh test`` uses it.
``python -m host.tools --others-cannot-run PATH`` prints why other users cannot execute
``PATH`` (nothing when they can): ``./dev.sh`` warns of a venv private to its owner.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Tool:
    """A binary and where it comes from."""

    binary: str
    #: Debian package that installs it, or None when Debian does not package it
    package: str | None
    #: how to get it when Debian does not package it
    elsewhere: str = ""

    def hint(self) -> str:
        """``apt-get install <package>``, or how to get it otherwise."""
        return f"apt-get install {self.package}" if self.package else self.elsewhere


_BMV2 = ("not packaged by Debian: ./dev.sh p4 builds it (README, 'P4 toolchain'), or p4lang's "
         "package repository (p4lang-bmv2)")
_P4C = ("not packaged by Debian: ./dev.sh p4 builds it (README, 'P4 toolchain'), or p4lang's "
        "package repository (p4lang-p4c)")

#: Every external binary netco or its tests run, by name.
TOOLS: dict[str, Tool] = {t.binary: t for t in (
    Tool("ip", "iproute2"),
    Tool("tc", "iproute2"),
    Tool("nft", "nftables"),
    Tool("ping", "iputils-ping"),
    Tool("ethtool", "ethtool"),
    Tool("brctl", "bridge-utils"),
    Tool("tshark", "tshark"),
    Tool("sysctl", "procps"),
    Tool("unshare", "util-linux"),
    Tool("nsenter", "util-linux"),
    Tool("setpriv", "util-linux"),
    Tool("mount", "mount"),
    Tool("mn", "mininet"),
    Tool("mnexec", "mininet"),
    Tool("make", "make"),
    Tool("cc", "gcc"),
    Tool("gcc", "gcc"),
    Tool("simple_switch_grpc", None, _BMV2),
    Tool("p4c", None, _P4C),
)}

#: What a Mininet testbed (:class:`control_plane.testbed.net.Testbed`) runs: refused without.
MININET_TESTBED = ("mnexec", "ip", "tc", "ethtool", "nft")
#: What the Mininet tests run: the testbed's binaries, Linux bridges, ``ping`` between hosts.
MININET_TEST_TOOLS = ("brctl", *MININET_TESTBED, "ping")
#: What the test suite runs where it can (the Debian packages ``./dev.sh test`` and ``.ci/run``
#: install; tests needing one that is missing skip naming its package).
TEST_TOOLS = ("ip", "tc", "sysctl", "nft", "ping", "ethtool", "brctl", "tshark", "mnexec",
              "unshare", "nsenter", "setpriv")


class MissingToolError(RuntimeError):
    """A binary netco needs is not on ``PATH``; the message names the package to install."""

    def __init__(self, binary: str, why: str = "") -> None:
        self.binary = binary
        super().__init__(missing_reason(binary, why))


def tool(binary: str) -> Tool:
    """The table's entry for ``binary`` (KeyError for a binary the table does not know: add it)."""
    try:
        return TOOLS[binary]
    except KeyError:
        raise KeyError(f"{binary!r} is not in host.tools.TOOLS: add it with its Debian "
                       "package") from None


def missing_reason(binary: str, why: str = "") -> str:
    """``<binary> not on PATH (apt-get install <package>)`` (``why``: what needs it)."""
    need = f", needed {why}" if why else ""
    return f"{binary} not on PATH{need} ({tool(binary).hint()})"


def which(binary: str, path: str | None = None) -> str | None:
    """Where ``binary`` is on ``path`` (default ``$PATH``), or None; the binary must be in
    :data:`TOOLS`."""
    tool(binary)
    return shutil.which(binary, path=path)


def require(*binaries: str, why: str = "", path: str | None = None) -> None:
    """Raise :class:`MissingToolError` for the first of ``binaries`` not on ``path``."""
    for b in binaries:
        if which(b, path) is None:
            raise MissingToolError(b, why)


def require_command(argv: list[str] | tuple[str, ...], why: str = "") -> None:
    """Raise :class:`MissingToolError` when ``argv`` starts with a binary of :data:`TOOLS` that is
    not on ``PATH`` (commands of other programs, or by absolute path, pass unchecked): the
    check a helper makes before running a command it was handed."""
    if argv and argv[0] in TOOLS:
        require(argv[0], why=why)


def missing(*binaries: str, path: str | None = None) -> str | None:
    """One line naming what of ``binaries`` is not on ``path`` and the packages to install,
    or None when all are there (a skip reason)."""
    gone = [b for b in binaries if which(b, path) is None]
    if not gone:
        return None
    debian = list(dict.fromkeys(TOOLS[b].package for b in gone if TOOLS[b].package))
    other = [TOOLS[b] for b in gone if not TOOLS[b].package]
    hints = ([f"apt-get install {' '.join(debian)}"] if debian else []) + \
        [f"{t.binary}: {t.elsewhere}" for t in other]
    return f"{', '.join(gone)} not on PATH ({'; '.join(hints)})"


def packages(binaries: tuple[str, ...] | list[str], only_missing: bool = False,
             path: str | None = None) -> list[str]:
    """The Debian packages of ``binaries`` (of those not on ``path`` with ``only_missing``)."""
    return list(dict.fromkeys(
        TOOLS[b].package for b in binaries
        if TOOLS[b].package and not (only_missing and which(b, path) is not None)))


def exec_blocked(path: str, uid: int | None = None, gids: set[int] | None = None) -> str | None:
    """Why user ``uid`` with groups ``gids`` (default: this process's) cannot execute ``path``
    (a folder on the way, the link's or the file's own, it cannot enter; or the file without
    an execute bit for it), or None when the modes allow it. ``uid=-1``: any other user.

    Read from the modes, not ``os.access``: inside a user namespace the caller has no more
    access than its uid and groups give (capabilities held outside, e.g. CAP_DAC_OVERRIDE, do
    not reach files of owners the namespace does not map, such as root's).
    """
    import pwd
    import stat

    if uid is None:
        uid, gids = os.getuid(), {os.getgid(), *os.getgroups()}
    gids = gids or set()

    def allowed(st: os.stat_result) -> bool:
        if uid == 0:   # root passes every folder; a file needs some execute bit
            return stat.S_ISDIR(st.st_mode) or bool(st.st_mode & 0o111)
        if st.st_uid == uid:
            return bool(st.st_mode & stat.S_IXUSR)
        if st.st_gid in gids:
            return bool(st.st_mode & stat.S_IXGRP)
        return bool(st.st_mode & stat.S_IXOTH)

    def mode(st: os.stat_result) -> str:
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        return f"mode {stat.S_IMODE(st.st_mode):04o} (owner {owner})"

    real = os.path.realpath(path)
    for p in dict.fromkeys([os.path.abspath(path), real]):
        for d in reversed(Path(p).parents):
            try:
                st = os.stat(d)
            except OSError:
                continue
            if not allowed(st):
                return f"its directory {d} is {mode(st)}"
    try:
        st = os.stat(real)
    except OSError as exc:
        return f"{real}: {exc.strerror}"
    return None if allowed(st) else f"{real} is {mode(st)}"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--others-cannot-run"] and len(argv) == 2:
        why = exec_blocked(argv[1], uid=-1)
        if why:
            print(why)
        return 0
    only_missing = "--missing" in argv
    names = [a for a in argv if a != "--missing"] or list(TEST_TOOLS)
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        print(f"python -m host.tools: unknown binary {', '.join(unknown)} (known: "
              f"{', '.join(TOOLS)})", file=sys.stderr)
        return 2
    print(" ".join(packages(names, only_missing, os.environ.get("PATH"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
