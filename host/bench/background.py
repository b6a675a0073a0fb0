"""Background load beside a measurement, so that "on a busy machine" can be repeated.

A worker that trains also computes: the backward pass, a data loader, or an unrelated build
share its cores with the exchange. ``benchmarks/shaped.py --background`` runs one of these
beside its measurements, every process at the lowest priority (nice 19), so that the numbers
say how the exchange fares when it does not have the machine to itself (issue 35):

``none``
    nothing (the default).
``busy``
    ``procs`` processes spinning in a loop: CPU only, no memory traffic.
``compile``
    ``procs`` loops compiling a generated C translation unit with ``cc -O2`` (many large
    functions, so each compile takes seconds and a few hundred MB): the memory- and
    cache-heavy load of a build, which a spinning loop does not reproduce.

The load is verified, not assumed: :meth:`Background.usage` reads the machine's nice CPU time
(``/proc/stat``, the time spent by processes with a positive nice value) since the load
started, so a report shows how many cores the background actually took.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

#: The kinds of background load, in the order ``--background`` lists them.
KINDS = ("none", "busy", "compile")
#: Functions in the generated translation unit (5-15 s and about 300 MB per ``cc -O2`` here).
COMPILE_FUNCTIONS = 160


def nice_cpu_s() -> float:
    """CPU seconds spent so far by niced processes on this machine (``/proc/stat``'s ``nice``)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[2]) / os.sysconf("SC_CLK_TCK")


def compile_source(functions: int = COMPILE_FUNCTIONS) -> str:
    """A C translation unit that keeps ``cc -O2`` busy for seconds: unrolled arithmetic over
    local arrays in many functions (register allocation and scheduling dominate the compile)."""
    out = ["#include <stddef.h>"]
    for f in range(functions):
        body = [f"double fn{f}(const double *x, size_t n) {{", "  double a[64] = {0};",
                "  for (size_t i = 0; i + 64 <= n; i += 64) {"]
        body += [f"    a[{k}] += x[i + {k}] * {k + f + 1}.0 - a[{(k * 7 + f) % 64}] * 0.5;"
                 for k in range(64)]
        body += ["  }", "  double s = 0;", "  for (int k = 0; k < 64; k++) s += a[k] * a[k];",
                 "  return s;", "}"]
        out += body
    return "\n".join(out) + "\n"


@dataclasses.dataclass
class Background:
    """A running background load (see the module docstring); end it with :meth:`stop`."""

    kind: str
    procs: int
    pids: list[int] = dataclasses.field(default_factory=list)
    started: float = 0.0
    nice_at_start: float = 0.0
    workdir: Path | None = None

    def usage(self) -> dict:
        """The load's kind, process count and the cores it took so far (nice CPU / wall)."""
        wall = max(time.monotonic() - self.started, 1e-9)
        cpu = nice_cpu_s() - self.nice_at_start
        return {"kind": self.kind, "procs": self.procs, "nice": 19,
                "wall_s": round(wall, 1), "nice_cpu_s": round(cpu, 1),
                "cores_taken": round(cpu / wall, 2)}

    def stop(self) -> None:
        """End the load's processes (their process groups, started here) and its files."""
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.pids.clear()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def _lowest_priority() -> None:
    os.nice(19)


def start(kind: str, procs: int | None = None) -> Background:
    """Start ``procs`` (default: one per CPU) processes of background load ``kind`` at nice 19.

    Raises
    ------
    ValueError
        ``kind`` is not one of :data:`KINDS`, or ``procs`` < 1.
    host.tools.MissingToolError
        ``compile`` without a C compiler (the message names the package).
    """
    if kind not in KINDS:
        raise ValueError(f"background {kind!r}: one of {', '.join(KINDS)}")
    n = (os.cpu_count() or 1) if procs is None else procs
    if n < 1:
        raise ValueError(f"background processes {n}: must be >= 1")
    bg = Background(kind=kind, procs=0 if kind == "none" else n)
    if kind == "compile":
        from host.tools import require

        require("cc", why="the compile background load")
        bg.workdir = Path(tempfile.mkdtemp(prefix="netco-bg-"))
        (bg.workdir / "load.c").write_text(compile_source())
        argv = ["/bin/sh", "-c", "while :; do cc -O2 -c load.c -o load$$.o; done"]
    elif kind == "busy":
        argv = [sys.executable, "-c", "while True: pass"]
    bg.started, bg.nice_at_start = time.monotonic(), nice_cpu_s()
    try:
        for _ in range(bg.procs):
            p = subprocess.Popen(argv, cwd=bg.workdir, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True, preexec_fn=_lowest_priority)
            bg.pids.append(p.pid)
    except BaseException:
        bg.stop()   # the ones already started, and the work folder
        raise
    if bg.procs:
        log.info("background %s: %d processes at nice 19", kind, bg.procs)
    return bg


@contextlib.contextmanager
def running(kind: str, procs: int | None = None) -> Iterator[Background]:
    """:func:`start` a load for the ``with`` block and :meth:`Background.stop` it after."""
    bg = start(kind, procs)
    try:
        yield bg
    finally:
        bg.stop()
