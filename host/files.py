"""Files other processes read while they are being written: whole or not at all."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the whole new one.

    The text goes to a temporary file beside ``path`` first, which then replaces ``path``
    (``os.replace``: atomic on POSIX within one file system). A reader polling for ``path``
    (a ``--ready-file``, a state or statistics file) never finds it empty or half written;
    opening it for writing in place showed one empty to a test under load.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


__all__ = ["write_atomic"]
