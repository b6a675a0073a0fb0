"""``netco p4``: build the P4 program (generate per-coordinate code, compile with p4c).

``netco p4 build`` is the same as ``make -C p4``: it runs ``p4/gen.py`` and, when p4c is on
PATH, compiles ``p4/v1model/main.p4`` into ``p4/build/``. ``--check`` only reports whether
the committed outputs are stale.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "p4" / "build.py"


def _load_build() -> ModuleType:
    from host.cli.main import UsageError

    if not BUILD_SCRIPT.exists():
        raise UsageError(f"{BUILD_SCRIPT} not found: run netco p4 from a source checkout")
    spec = importlib.util.spec_from_file_location("netco_p4_build", BUILD_SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_build(args: argparse.Namespace) -> int:
    """Generate and compile; print a report (``--json``: one JSON object)."""
    mod = _load_build()
    if args.p4c and not Path(args.p4c).exists():
        from host.cli.main import UsageError

        raise UsageError(f"--p4c {args.p4c}: no such file; give the p4c executable or omit --p4c")
    code, report = mod.build(args.p4c, args.check)
    report["exit_code"] = code
    if args.json:
        print(json.dumps(report, indent=2))
        return code
    if args.check:
        print(("STALE: " if report["stale"] else "fresh: ") + report["reason"])
    elif code == mod.NO_P4C:
        print(f"netco p4 build: {report['message']} ({report['reason']})")
    else:
        print(f"netco p4 build: {report['p4c_version']}: {report['command']}")
        print(f"  exit {report['returncode']} after {report['seconds']} s")
        if report["output"]:
            print("  " + report["output"].replace("\n", "\n  "))
        for out in report.get("outputs", []):
            print(f"  wrote {out}")
    return code


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``netco p4`` and its ``build`` subcommand."""
    sub = parser.add_subparsers(dest="p4_command", metavar="ACTION")
    b = sub.add_parser("build", help="generate and compile the v1model program (make -C p4)",
                       description=__doc__)
    b.add_argument("--check", action="store_true",
                   help="compile nothing; exit 1 if p4/build is stale")
    b.add_argument("--p4c", metavar="PATH", help="p4c executable (default: p4c on PATH)")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.set_defaults(func=run_build)
    parser.set_defaults(func=lambda _args: parser.print_help() or 2)
