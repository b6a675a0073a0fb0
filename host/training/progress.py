"""Training progress on stderr: a tqdm bar on a terminal, plain lines anywhere else.

A bar redrawn into a log file becomes one long line of carriage returns; into a file or a
pipe :class:`Progress` writes a plain line every tenth of the run (and at the end) instead.
"""

from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    """Progress of ``total`` steps named ``desc``: ``update()`` per step, ``show(**values)``.

    Parameters
    ----------
    total : int
        Steps in the run.
    desc : str
        What runs (the first word of each line).
    out : file, optional
        Where to write (default ``sys.stderr``).
    tty : bool, optional
        Draw a bar (default: when ``out`` is a terminal).
    """

    def __init__(self, total: int, desc: str, out: TextIO | None = None,
                 tty: bool | None = None) -> None:
        self.out = out or sys.stderr
        self.total = max(1, total)
        self.desc = desc
        self.done = 0
        self.values: dict[str, str] = {}
        self.every = max(1, self.total // 10)
        if tty is None:
            tty = self.out.isatty()
        self._bar = None
        if tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, file=self.out, leave=False)

    def show(self, **values: str) -> None:
        """Values shown beside the count from now on (e.g. the last held-out metric)."""
        self.values.update(values)
        if self._bar is not None:
            self._bar.set_postfix(self.values)

    def update(self, n: int = 1) -> None:
        """``n`` more steps done."""
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.done % self.every == 0 or self.done >= self.total:
            extra = "".join(f", {k} {v}" for k, v in self.values.items())
            self.out.write(f"{self.desc}: step {self.done}/{self.total}{extra}\n")
            self.out.flush()

    def close(self) -> None:
        """Remove the bar (plain lines stay)."""
        if self._bar is not None:
            self._bar.close()
