"""Where the data path's processes run: the switch on a CPU of its own, workers on the rest.

On a machine shared by the software target and its workers (the embedded default, and the
benchmark's loopback runs), the switch is the one process every contribution passes through.
Left to the scheduler, three or more busy processes on two CPUs keep moving, and whenever a
worker lands on the switch's CPU the switch waits for it. Measured on the 2-CPU development
VM (``benchmarks/transport.py``, UDP loopback, 2^24 coordinates per run; docs/transport.md,
session 13): the switch alone on one CPU and the workers sharing the other moved 1.25-1.38 M
packets/s per worker for n = 2, against 0.73-1.0 M when nothing was pinned; the C echo
(``host/transport/kecho.c``) placed the same way moved 1.2-2.4 M, against 1.1-1.6 M free.

The switch takes ``--cpu N`` (``netco switch``); the benchmark places its workers with
:func:`pin` and measures the kernel's limit in both placements.
"""

from __future__ import annotations

import os


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask, sorted)."""
    return sorted(os.sched_getaffinity(0))


def cpu_problem(cpu: int, flag: str = "--cpu") -> str | None:
    """One line naming ``flag`` and the fix when ``cpu`` is not a CPU this process may use,
    else None (``-1``: no pinning, always fine)."""
    if cpu == -1:
        return None
    cpus = allowed_cpus()
    if cpu not in cpus:
        shown = ",".join(str(c) for c in cpus)
        return f"{flag} {cpu}: give one of the CPUs this process may use ({shown}), or -1 for none"
    return None


def pin(cpus: set[int] | list[int], pid: int = 0) -> None:
    """Restrict every thread of process ``pid`` (0: this one) to ``cpus``.

    ``os.sched_setaffinity`` sets one thread (Linux); threads started before the call (BLAS
    pools, gRPC) keep their masks unless each is set, so every task of the process is.
    """
    mask = set(cpus)
    proc = os.getpid() if pid == 0 else pid
    try:
        tasks = [int(t) for t in os.listdir(f"/proc/{proc}/task")]
    except OSError:
        tasks = [proc]
    for tid in tasks:
        try:
            os.sched_setaffinity(tid, mask)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


def switch_and_workers() -> tuple[int, list[int]] | None:
    """The split the benchmark uses: the switch on the last allowed CPU, workers on the others;
    None on a machine with a single CPU (nothing to split)."""
    cpus = allowed_cpus()
    if len(cpus) < 2:
        return None
    return cpus[-1], cpus[:-1]


__all__ = ["allowed_cpus", "cpu_problem", "pin", "switch_and_workers"]
