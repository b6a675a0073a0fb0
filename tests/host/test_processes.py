"""``host.processes.stop_process``: SIGTERM first, SIGKILL for a process that ignores it."""

from __future__ import annotations

import signal
import subprocess
import sys

from host.processes import stop_process


def test_a_process_that_ends_on_sigterm_is_not_killed():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stop_process(proc, grace=10.0)
    assert proc.returncode == -signal.SIGTERM


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace():
    code = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    stop_process(proc, grace=0.2)
    assert proc.returncode == -signal.SIGKILL
    proc.stdout.close()


def test_none_and_an_exited_process_are_left_alone():
    stop_process(None)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    stop_process(proc)
    assert proc.returncode == 0
