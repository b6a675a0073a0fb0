"""netco p4: build the P4 programs (generate per-coordinate code, compile).

netco p4 build runs p4/gen.py and, when p4c is on PATH, compiles p4/v1model/main.p4 into
p4/build/; --target tofino|tofino2|all compiles p4/tna/main.p4 with the open-source Tofino
backend where it is installed (--target all is make -C p4). Without a compiler nothing is
compiled, and that is no error while the committed outputs match the sources. --check only
reports whether the committed outputs are stale.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from types import ModuleType

from host.paths import P4_BUILD_SCRIPT as BUILD_SCRIPT


def _load_build() -> ModuleType:
    from host.errors import UsageError

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
        from host.errors import UsageError

        raise UsageError(f"--p4c {args.p4c}: no such file; give the p4c executable or omit --p4c")
    if args.target != "v1model":
        targets = list(mod.TARGETS) if args.target == "all" else [args.target]
        code, reports = mod.build_targets(targets, args.p4c, None, args.check)
        if args.json:
            print(json.dumps({"exit_code": code, "targets": reports}, indent=2))
            return code
        for tg, rep in reports.items():
            if args.check:
                state = "STALE" if rep.get("stale") else "fresh"
                print(f"[{tg}] {state}: {rep.get('reason')}")
            elif rep.get("skipped") or rep.get("p4c") is None:
                print(f"[{tg}] skipped: {rep.get('message')}")
            else:
                print(f"[{tg}] exit {rep['returncode']} after {rep['seconds']} s: {rep['command']}")
                for out in rep.get("outputs", []):
                    print(f"  wrote {out}")
                if rep["returncode"] != 0:
                    print("  " + rep["output"][-4000:].replace("\n", "\n  "))
        return code
    code, report = mod.build(args.p4c, args.check)
    report["exit_code"] = code
    if args.json:
        print(json.dumps(report, indent=2))
        return code
    if args.check:
        print(("STALE: " if report["stale"] else "fresh: ") + report["reason"])
    elif report.get("p4c") is None:
        print(f"netco p4 build: {report['message']}")
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
    b = sub.add_parser("build", help="generate and compile the P4 programs (make -C p4)",
                       description=__doc__)
    b.add_argument("--target", default="v1model", choices=["v1model", "tofino", "tofino2", "all"],
                   help="v1model (BMv2, default), tofino / tofino2 (TNA, Tofino backend), or "
                        "all: every target whose compiler is present")
    b.add_argument("--check", action="store_true",
                   help="compile nothing; exit 1 if p4/build is stale")
    b.add_argument("--p4c", metavar="PATH", help="p4c executable (default: p4c on PATH)")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.set_defaults(func=run_build)
    parser.set_defaults(func=lambda _args: parser.print_help() or 2)
