"""``host/placement.py``: where the switch and its workers run (no timings asserted)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from host.placement import allowed_cpus, cpu_problem, pin, switch_and_workers


def test_cpu_problem_names_the_flag_and_the_cpus_allowed():
    assert cpu_problem(-1) is None
    assert cpu_problem(allowed_cpus()[0]) is None
    why = cpu_problem(4096, "--cpu")
    assert why is not None and why.startswith("--cpu 4096: give one of the CPUs")
    assert ",".join(str(c) for c in allowed_cpus()) in why


def test_switch_gets_the_last_cpu_and_workers_the_rest():
    cpus = allowed_cpus()
    split = switch_and_workers()
    if len(cpus) < 2:
        assert split is None
    else:
        assert split == (cpus[-1], cpus[:-1])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="placement needs two CPUs")
def test_pin_sets_every_thread_of_a_running_process():
    """Threads started before the pin (a pool, as numpy's BLAS starts at import) are moved
    too, not only the main thread."""
    code = ("import threading, time\n"
            "ts = [threading.Thread(target=time.sleep, args=(60,), daemon=True) for _ in range(3)]\n"
            "[t.start() for t in ts]\nprint('up', flush=True)\ntime.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "up"
        cpu = max(os.sched_getaffinity(0))
        pin({cpu}, p.pid)
        tasks = [int(t) for t in os.listdir(f"/proc/{p.pid}/task")]
        assert len(tasks) == 4
        assert all(os.sched_getaffinity(t) == {cpu} for t in tasks)
    finally:
        p.kill()
        p.wait(timeout=10)
