#!/usr/bin/env python3
"""Start-up time of the ``netco`` command: every ``--help`` and a set of usage errors.

Issue 36: ``netco --help``, every subcommand's ``--help`` (nested ones too: ``thc table``,
``controller apply``, ``explore search``, ...) and every usage error must answer within
``--limit`` seconds (default 0.5) on an idle core; heavy imports (torch, scikit-learn, SciPy,
matplotlib, grpc/finsy, Flower) belong where a command's work starts, not where its parser is
built. The commands are discovered from the parser (:data:`control_plane.cli.main.SUBCOMMANDS`
and every nested subcommand); the usage errors are :data:`USAGE_ERRORS` plus one unknown
option per command. Each runs ``--repeats`` times, each time in a fresh process of the
installed ``netco`` script (``python -m control_plane.cli.main`` where there is none), and the
median wall time counts. A usage error must exit 2 with an error line and no traceback, a
help 0: a command that does not (say one that started its work) is marked ``ok: false``.

Prints a table, or with ``--json`` one object::

    {"limit_s", "repeats", "load_before", "load_after", "netco",
     "commands": [{"command", "kind", "median_s", "max_s", "rc", "ok"}, ...],
     "worst": {"command", "median_s"}, "met", "all_ok"}

``met``: the worst median is within the limit. Times depend on the machine's load
(``load_before``/``load_after`` are the 1-minute load averages): measure on an idle machine.

    .venv/bin/python benchmarks/cli_startup.py                 # table, 3 runs per command
    .venv/bin/python benchmarks/cli_startup.py --json --repeats 5
    .venv/bin/python benchmarks/cli_startup.py --only "thc" "demo --workers"
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from control_plane.cli.main import SUBCOMMANDS, build_parser

#: Usage errors a user meets (the issue's two first): each must be refused before any work.
USAGE_ERRORS: tuple[tuple[str, ...], ...] = (
    ("demo", "--workers", "-3"),
    ("thc", "table", "--bits", "9"),
    ("thc", "roundtrip", "--inputs", "/nonexistent/w0.npy", "--output", "/nonexistent/avg.npy"),
    ("train", "--task", "digits", "--workers", "0"),
    ("train", "--task", "no-such-task"),
    ("bench", "codec", "--repeat", "0"),
    ("fielding", "run", "--scenario", "label", "--clients", "3"),
    ("fielding", "flower", "--clients", "2"),
    ("switch", "--slots", "0", "--port", "1=udp:127.0.0.1:47001"),
    ("controller", "apply", "/nonexistent/net.yaml"),
    ("run", "--config", "/nonexistent/net.yaml", "--job", "a", "--", "true"),
    ("testbed", "up", "--topo", "/nonexistent/topo.yaml"),
    ("explore", "search", "/nonexistent/scenario.yaml"),
    ("capture", "--read", "/nonexistent/x.pcap"),
    ("p4", "build", "--target", "no-such-target"),
)
#: The unknown option added to every command.
UNKNOWN = "--no-such-option"
#: Seconds one run may take before it counts as hung (a command that started its work).
RUN_TIMEOUT = 60.0


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def command_paths() -> list[tuple[str, ...]]:
    """Every command and nested subcommand, as argv without ``netco`` (``()`` is ``netco``)."""
    paths: list[tuple[str, ...]] = [()]
    for name, _, _ in SUBCOMMANDS:
        (top,) = [p for n, p in _subparsers(build_parser(name)) if n == name]
        stack = [((name,), top)]
        while stack:
            path, parser = stack.pop()
            paths.append(path)
            stack += [((*path, n), q) for n, q in _subparsers(parser)]
    return sorted(paths)


def commands() -> list[tuple[str, tuple[str, ...]]]:
    """(kind, argv) of every measured command: ``help`` or ``usage-error``."""
    paths = command_paths()
    out = [("help", (*p, "--help")) for p in paths]
    out += [("usage-error", u) for u in USAGE_ERRORS]
    out += [("usage-error", (*p, UNKNOWN)) for p in paths if p]
    return out


def netco_argv() -> list[str]:
    """The ``netco`` a user runs: the script beside this Python, else the module."""
    script = Path(sys.executable).with_name("netco")
    if script.is_file():
        return [str(script)]
    found = shutil.which("netco")
    return [found] if found else [sys.executable, "-m", "control_plane.cli.main"]


def run_once(netco: list[str], argv: tuple[str, ...]) -> tuple[float, int, str]:
    """(wall seconds, exit status, stderr) of one fresh ``netco argv``."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run([*netco, *argv], capture_output=True, text=True, timeout=RUN_TIMEOUT,
                           stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t0, -1, f"still running after {RUN_TIMEOUT:g} s"
    return time.perf_counter() - t0, p.returncode, p.stderr


def _ok(kind: str, rc: int, stderr: str) -> bool:
    if kind == "help":
        return rc == 0 and not stderr.strip()
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    return (rc == 2 and "Traceback" not in stderr
            and any(": error: " in ln for ln in lines))


def measure(selected: list[tuple[str, tuple[str, ...]]], repeats: int,
            netco: list[str], progress: bool) -> list[dict]:
    """One row per command: median and max wall time over ``repeats`` fresh runs."""
    run_once(netco, ("--help",))  # file cache warm for every row alike
    rows = []
    for i, (kind, argv) in enumerate(selected, 1):
        runs = [run_once(netco, argv) for _ in range(repeats)]
        times = [t for t, _, _ in runs]
        rcs = {rc for _, rc, _ in runs}
        row = {"command": " ".join(["netco", *argv]), "kind": kind,
               "median_s": round(statistics.median(times), 4), "max_s": round(max(times), 4),
               "rc": runs[-1][1], "ok": len(rcs) == 1 and all(_ok(kind, rc, e) for _, rc, e in runs)}
        if not row["ok"]:
            row["stderr_tail"] = runs[-1][2][-300:]
        rows.append(row)
        if progress:
            print(f"[{i}/{len(selected)}] {row['command']}: {row['median_s']:.3f} s",
                  file=sys.stderr, flush=True)
    return rows


def report(rows: list[dict], repeats: int, limit: float, load_before: float,
           netco: list[str]) -> dict:
    worst = max(rows, key=lambda r: r["median_s"])
    return {"limit_s": limit, "repeats": repeats, "netco": " ".join(netco),
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
            "commands": rows, "worst": {"command": worst["command"], "median_s": worst["median_s"]},
            "met": worst["median_s"] <= limit, "all_ok": all(r["ok"] for r in rows)}


def format_table(rep: dict) -> str:
    width = max(len(r["command"]) for r in rep["commands"])
    lines = [f"{'command':<{width}}  {'kind':<11}  {'median s':>8}  {'max s':>7}  {'rc':>3}  ok"]
    for r in rep["commands"]:
        flag = "" if r["median_s"] <= rep["limit_s"] else "  > limit"
        lines.append(f"{r['command']:<{width}}  {r['kind']:<11}  {r['median_s']:>8.3f}  "
                     f"{r['max_s']:>7.3f}  {r['rc']:>3}  {'yes' if r['ok'] else 'NO'}{flag}")
    w = rep["worst"]
    lines += ["", f"worst median: {w['median_s']:.3f} s ({w['command']}); limit {rep['limit_s']:g} s: "
              f"{'met' if rep['met'] else 'NOT met'}; {len(rep['commands'])} commands x "
              f"{rep['repeats']} runs; load average {rep['load_before']:g} before, "
              f"{rep['load_after']:g} after"]
    if not rep["all_ok"]:
        lines.append("some commands did not exit as expected (help: 0; usage error: 2 and one "
                     "error line, no traceback): see 'ok'")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3,
                   help="fresh runs per command; the median counts (default 3)")
    p.add_argument("--limit", type=float, default=0.5,
                   help="seconds each command's median may take (default 0.5, issue 36)")
    p.add_argument("--only", nargs="+", metavar="PREFIX",
                   help="measure only commands starting with one of these, with or without "
                        "'netco' (e.g. 'thc' 'demo --workers'; 'netco --help' for the top level)")
    p.add_argument("--list", action="store_true",
                   help="print the commands that would be measured and exit")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error(f"--repeats {a.repeats}: must be at least 1")
    if not a.limit > 0:
        p.error(f"--limit {a.limit}: must be > 0 (seconds)")
    selected = commands()
    if a.only:
        selected = [(k, c) for k, c in selected
                    if any(" ".join(c).startswith(pre.strip())
                           or " ".join(["netco", *c]).startswith(pre.strip()) for pre in a.only)]
        if not selected:
            p.error(f"--only {' '.join(a.only)}: matches no command (see --list)")
    if a.list:
        for kind, c in selected:
            print(json.dumps({"kind": kind, "argv": list(c)}) if a.json
                  else f"{kind:<11}  netco {' '.join(c)}")
        return 0
    netco = netco_argv()
    load = os.getloadavg()[0]
    rows = measure(selected, a.repeats, netco, progress=not a.json or sys.stderr.isatty())
    rep = report(rows, a.repeats, a.limit, load, netco)
    print(json.dumps(rep, indent=1) if a.json else format_table(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
