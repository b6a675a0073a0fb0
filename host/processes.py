"""Ending a child process this program started: by its PID, politely first."""

from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen | None, grace: float = 10.0, reap: float = 5.0) -> None:
    """Terminate a process we started (SIGTERM, by its PID), kill it (SIGKILL) after ``grace``
    seconds, then wait up to ``reap`` seconds for it to be gone. None or an exited process: nothing."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(reap)
