"""Issue 36: ``netco ... --help`` and usage errors start without the heavy libraries.

Not timed (the times are ``benchmarks/cli_startup.py``'s, run on an idle machine): each case
runs ``netco`` in a fresh interpreter and looks at what it imported. The commands are the
benchmark's own (every subcommand from the parser, nested ones too), so a new subcommand is
checked as soon as it is in :data:`control_plane.cli.main.SUBCOMMANDS`.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import ModuleType

import pytest

from host.paths import REPO


def _benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("netco_cli_startup",
                                                  REPO / "benchmarks" / "cli_startup.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BENCH = _benchmark()
PATHS = BENCH.command_paths()

#: What a parser or a usage error must not load: seconds of start-up each (torch ~0.6 s,
#: scikit-learn ~0.5 s, SciPy ~0.15 s, grpc/finsy ~0.1 s on an idle core, more under load).
HEAVY = frozenset({"torch", "sklearn", "scipy", "matplotlib", "grpc", "finsy", "flwr", "scapy"})

#: Usage errors refused before the work that needs them, with what they may load on the way
#: (``thc table`` checks b, g and p with the table module: SciPy).
USAGE_ERRORS = {
    ("demo", "--workers", "-3"): HEAVY,
    ("demo", "--out", "/nonexistent/report.json"): HEAVY,
    ("thc", "table", "--bits", "9"): HEAVY - {"scipy"},
    ("thc", "roundtrip", "--inputs", "/nonexistent/w0.npy", "--output", "x.npy"): HEAVY - {"scipy"},
    ("train", "--task", "digits", "--workers", "0"): HEAVY,
    ("train", "--task", "no-such-task"): HEAVY,
    ("train", "--task", "digits", "--granularity", "0"): HEAVY - {"scipy"},
    ("bench", "codec", "--repeat", "0"): HEAVY,
    ("fielding", "run", "--scenario", "label", "--clients", "3"): HEAVY,
    ("fielding", "run", "--scenario", "label", "--methods", "nope"): HEAVY,
    ("fielding", "flower", "--clients", "2"): HEAVY,
}

#: The child: runs ``netco ARGV`` as the entry point does, then prints the top-level names of
#: every module it imported and the exit status.
CHILD = r"""
import json, sys
from control_plane.cli.main import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exc:
    rc = exc.code
print(json.dumps({"rc": rc, "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def loaded(argv: tuple[str, ...], tmp_path) -> tuple[int, set[str]]:
    p = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, check=False)
    assert p.stdout.strip(), p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return out["rc"], set(out["modules"])


def test_the_commands_include_nested_subcommands() -> None:
    for path in [(), ("thc", "table"), ("controller", "apply"), ("explore", "search"),
                 ("fielding", "flower"), ("testbed", "up"), ("train",), ("switch",)]:
        assert path in PATHS


def test_the_check_sees_a_heavy_import(tmp_path) -> None:
    """The child reports what a command loaded: a command that does start work loads torch."""
    rc, mods = loaded(("thc", "make-inputs", "--workers", "1", "--elements", "4"), tmp_path)
    assert rc == 0 and "numpy" in mods and (tmp_path / "w0.npy").is_file()
    _, plain = loaded(("--help",), tmp_path)
    assert not plain & HEAVY


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "netco")
def test_help_loads_no_heavy_module(path, tmp_path) -> None:
    rc, mods = loaded((*path, "--help"), tmp_path)
    assert rc == 0
    assert not mods & HEAVY, f"netco {' '.join(path)} --help imports {sorted(mods & HEAVY)}"


@pytest.mark.parametrize("path", [p for p in PATHS if p], ids=" ".join)
def test_an_unknown_option_loads_no_heavy_module(path, tmp_path) -> None:
    rc, mods = loaded((*path, BENCH.UNKNOWN), tmp_path)
    assert rc == 2
    assert not mods & HEAVY, f"netco {' '.join(path)} {BENCH.UNKNOWN} imports {sorted(mods & HEAVY)}"


@pytest.mark.parametrize(("argv", "banned"), USAGE_ERRORS.items(), ids=[" ".join(a) for a in USAGE_ERRORS])
def test_a_usage_error_is_refused_before_the_heavy_imports(argv, banned, tmp_path) -> None:
    rc, mods = loaded(argv, tmp_path)
    assert rc == 2
    assert not mods & banned, f"netco {' '.join(argv)} imports {sorted(mods & banned)}"


def test_benchmark_reports_each_command_in_json(tmp_path) -> None:
    """``benchmarks/cli_startup.py --json`` on a few commands, one run each: the shape of the
    report and every command's exit as expected (no timing asserted)."""
    p = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cli_startup.py"), "--json",
                        "--repeats", "1", "--only", "thc table", "demo --workers"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads(p.stdout)
    assert rep["limit_s"] == 0.5 and rep["repeats"] == 1
    assert {"load_before", "load_after", "netco", "worst", "met", "all_ok"} <= set(rep)
    rows = {r["command"]: r for r in rep["commands"]}
    assert set(rows) == {"netco thc table --help", "netco thc table --bits 9",
                         f"netco thc table {BENCH.UNKNOWN}", "netco demo --workers -3"}
    for r in rows.values():
        assert set(r) >= {"kind", "median_s", "max_s", "rc", "ok"} and r["ok"], r
        assert 0 < r["median_s"] <= r["max_s"]
    assert rows["netco thc table --help"]["kind"] == "help" and rows["netco thc table --help"]["rc"] == 0
    assert rows["netco demo --workers -3"]["kind"] == "usage-error"
    assert rep["worst"]["median_s"] == max(r["median_s"] for r in rows.values())
    assert rep["met"] == (rep["worst"]["median_s"] <= rep["limit_s"]) and rep["all_ok"]


def test_benchmark_refuses_bad_options() -> None:
    for args, message in ((["--repeats", "0"], "--repeats 0"), (["--only", "nope"], "--only nope")):
        p = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cli_startup.py"), *args],
                           capture_output=True, text=True, timeout=120, check=False)
        assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize(("first", "then", "check"), [
    ("import host.ddp.attach", "from host.ddp import attach, thc_hook",
     "callable(attach) and attach.__module__ == 'host.ddp.attach' and callable(thc_hook)"),
    ("import control_plane.fielding.cli", "from control_plane.fielding import FieldingClusterer, jobs_for",
     "FieldingClusterer.__name__ == 'FieldingClusterer' and callable(jobs_for)"),
    ("import host.softswitch.cli", "from host.softswitch import SoftSwitch",
     "SoftSwitch.__module__ == 'host.softswitch.switch'"),
])
def test_packages_loaded_lazily_still_export_their_names(first, then, check) -> None:
    """The packages made lazy for a fast start give the same objects as before, whichever of
    their submodules was imported first (``host.ddp.attach`` is a module and a function)."""
    code = f"{first}\n{then}\nassert {check}\n"
    p = subprocess.run([sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
