"""The background load of ``benchmarks/shaped.py --background`` (host/bench/background.py).

Checked: each kind starts the processes it says, at nice 19, doing what it says (spinning, or
a real ``cc -O2`` of the generated file); stop ends them all and removes its files; the load
is measured from the machine's nice CPU time; bad values are one line through the benchmark.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from host.bench import background

ROOT = Path(__file__).resolve().parents[3]


def _nice(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


def _descendants(pid: int) -> list[int]:
    """The children of ``pid`` (from /proc, so that no ``ps`` is needed)."""
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            if ppid == pid:
                kids.append(int(d.name))
    return kids


def _state(pid: int) -> str | None:
    """The process's state letter (``Z``: a zombie), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _gone(pids: list[int], within_s: float = 10.0) -> bool:
    """Every pid ended (a killed grandchild is reaped by init a moment later)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if _state(p) not in (None, "Z")]
        if not alive:
            return True
        time.sleep(0.05)
    return False


def test_busy_processes_spin_at_nice_19_and_stop_ends_them():
    bg = background.start("busy", 2)
    try:
        assert len(bg.pids) == 2
        deadline = time.monotonic() + 30
        while bg.usage()["nice_cpu_s"] <= 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(_nice(p) == 19 for p in bg.pids)
        use = bg.usage()
        assert use["kind"] == "busy" and use["procs"] == 2 and use["nice_cpu_s"] > 0
    finally:
        pids = list(bg.pids)
        bg.stop()
    assert _gone(pids)


@pytest.mark.tools("cc")
def test_compile_load_runs_cc_on_the_generated_file_and_cleans_up():
    bg = background.start("compile", 1)
    workdir, shell = bg.workdir, bg.pids[0]
    try:
        assert workdir is not None and (workdir / "load.c").is_file()
        deadline = time.monotonic() + 30
        compilers: list[int] = []
        while not compilers and time.monotonic() < deadline:
            compilers = _descendants(shell)
            time.sleep(0.1)
        assert compilers, "no compiler started under the load's shell"
        assert all(_nice(p) == 19 for p in [shell, *compilers])
    finally:
        bg.stop()
    assert not workdir.exists()
    assert _gone([shell, *compilers])


@pytest.mark.tools("cc")
def test_the_generated_translation_unit_compiles(tmp_path):
    (tmp_path / "t.c").write_text(background.compile_source(functions=3))
    subprocess.run(["cc", "-O2", "-c", "t.c", "-o", "t.o"], cwd=tmp_path, check=True)
    assert (tmp_path / "t.o").stat().st_size > 0


def test_none_starts_nothing_and_bad_values_are_refused():
    bg = background.start("none")
    assert bg.pids == [] and bg.usage()["procs"] == 0
    bg.stop()
    with pytest.raises(ValueError, match="one of none, busy, compile"):
        background.start("heavy")
    with pytest.raises(ValueError, match=">= 1"):
        background.start("busy", 0)


@pytest.mark.parametrize("flags, says", [
    (["--background", "heavy"], "invalid choice: 'heavy'"),
    (["--background", "busy", "--background-procs", "0"], "--background-procs=0: must be >= 1"),
])
def test_shaped_benchmark_refuses_bad_background_flags_in_one_line(flags, says):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "shaped.py"), *flags],
                       capture_output=True, text=True, cwd=ROOT,
                       env=os.environ | {"PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr
