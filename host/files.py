"""Files other processes read while they are being written: whole or not at all."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_atomic(path: str | os.PathLike, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the whole new one.

    The text goes to a temporary file beside ``path`` first, which then replaces ``path``
    (``os.replace``: atomic on POSIX within one file system). A reader polling for ``path``
    (a ``--ready-file``, a state or statistics file) never finds it empty or half written;
    opening it for writing in place showed one empty to a test under load.

    ``mode`` (e.g. ``0o600`` for a file holding a secret) is the file's permission bits from
    its creation on: the temporary file is created with them, so the secret is never readable
    by others, not even for a moment.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        if mode is None:
            tmp.write_text(text)
        else:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), mode)   # the umask may have taken bits away
                f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


__all__ = ["write_atomic"]
