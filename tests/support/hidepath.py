"""A ``PATH`` without some binaries: a folder of symlinks to everything else on it.

How the tests show what happens on a machine without a tool (``nft``, ``ping``) on a machine
that has it: every other binary of ``PATH`` (and of the admin folders) stays reachable.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Where root's tools live (control_plane.testbed.isolate.ADMIN_DIRS; tests/host may not
#: import control_plane).
ADMIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def path_without(dest: Path, *hidden: str, path: str | None = None) -> str:
    """Fill ``dest`` with symlinks to the binaries of ``path`` (default ``$PATH``, plus
    /usr/sbin etc.) except ``hidden``; returns ``dest`` as a ``PATH`` value."""
    dest.mkdir(parents=True, exist_ok=True)
    dirs = [*(path if path is not None else os.environ.get("PATH", os.defpath)).split(os.pathsep),
            *ADMIN_DIRS, "/usr/bin", "/bin"]
    for d in dict.fromkeys(filter(None, dirs)):
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            link = dest / e.name
            if e.name in hidden or link.exists() or link.is_symlink():
                continue
            link.symlink_to(os.path.join(d, e.name))
    return str(dest)
