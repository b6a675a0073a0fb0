#!/usr/bin/env python3
"""Build the netco v1model program: generate, compile with p4c, record a stamp.

Steps: run ``p4/gen.py``; if ``p4c`` is on PATH (or ``--p4c`` names it) compile
``p4/v1model/main.p4`` for BMv2 into ``p4/build/netco.json`` and ``p4/build/netco.p4info.txtpb``
and write ``p4/build/stamp.json`` with the sources' hash and the compiler version. Without p4c
it says so and exits 3 (the committed outputs stay as they are).

``--check`` compiles nothing: it exits 1 when the committed outputs are stale (the stamp's
source hash differs from the current sources), 0 when fresh.

Used by ``make -C p4`` and ``netco p4 build``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BUILD = HERE / "build"
MAIN = HERE / "v1model" / "main.p4"
JSON_OUT = BUILD / "netco.json"
P4INFO_OUT = BUILD / "netco.p4info.txtpb"
STAMP = BUILD / "stamp.json"

#: exit codes
OK, STALE, FAILED, NO_P4C = 0, 1, 2, 3


def source_files() -> list[Path]:
    """Every file whose change makes the compiled outputs stale."""
    files = sorted((HERE / "v1model").rglob("*.p4"))
    files += [HERE / "gen.py", REPO / "host" / "protocol" / "layout.py"]
    return files


def sources_sha256() -> str:
    """Hash over the relative paths and contents of :func:`source_files`."""
    h = hashlib.sha256()
    for f in source_files():
        h.update(str(f.relative_to(REPO)).encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def outputs_sha256() -> str:
    """Hash over the committed compiler outputs (detects hand edits and partial commits)."""
    h = hashlib.sha256()
    for f in (JSON_OUT, P4INFO_OUT):
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def read_stamp() -> dict:
    """The committed stamp (empty dict when absent)."""
    return json.loads(STAMP.read_text()) if STAMP.exists() else {}


def is_stale() -> tuple[bool, str]:
    """Whether the committed outputs lag the sources, and why."""
    stamp = read_stamp()
    if not (JSON_OUT.exists() and P4INFO_OUT.exists() and stamp):
        return True, "p4/build has no compiled outputs or no stamp.json"
    if stamp.get("sources_sha256") != sources_sha256():
        return True, "sources changed since p4/build was compiled (stamp hash differs)"
    if stamp.get("outputs_sha256") != outputs_sha256():
        return True, "p4/build outputs differ from what the compiler wrote (stamp hash differs)"
    return False, "p4/build is up to date"


def p4c_version(p4c: str) -> str:
    """First line of ``p4c --version``."""
    out = subprocess.run([p4c, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).strip().splitlines()[-1] if (out.stdout or out.stderr) else "?"


def compile_p4(p4c: str, outdir: Path) -> dict:
    """Compile main.p4 into ``outdir`` (netco.json, netco.p4info.txtpb); returns timing/output.

    Runs from ``p4/`` with relative paths so the JSON's source references do not depend on
    where the repository lives.
    """
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="netco-p4c-") as tmp:
        cmd = [p4c, "--target", "bmv2", "--arch", "v1model", "--std", "p4-16",
               "-o", tmp, "--p4runtime-files", str(Path(tmp) / "netco.p4info.txtpb"),
               str(MAIN.relative_to(HERE))]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, check=False)
        seconds = time.monotonic() - t0
        # Peak RSS of the largest child so far (p4c's backend dominates), in MiB.
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        result = {
            "command": " ".join(["p4c", *cmd[1:]]),
            "returncode": proc.returncode,
            "seconds": round(seconds, 1),
            "peak_rss_mib": round(peak),
            "output": (proc.stdout + proc.stderr).strip(),
        }
        if proc.returncode == 0:
            # The JSON names the preprocessed file in the temporary directory; keep the
            # committed output independent of it (reproducible builds).
            text = (Path(tmp) / "main.json").read_text()
            (outdir / JSON_OUT.name).write_text(text.replace(f"{tmp}/", ""))
            shutil.copyfile(Path(tmp) / "netco.p4info.txtpb", outdir / P4INFO_OUT.name)
    return result


def build(p4c: str | None = None, check: bool = False) -> tuple[int, dict]:
    """Run the build; returns (exit code, report dict)."""
    sys.path.insert(0, str(HERE))
    import gen  # p4/gen.py, next to this file

    if check:
        gen_stale = gen.main(["--check"]) != 0
        stale, why = is_stale()
        report = {"stale": stale or gen_stale, "reason": why if not gen_stale
                  else "generated P4 files differ from p4/gen.py output"}
        return (STALE if report["stale"] else OK), report

    gen.main([])
    p4c = p4c or shutil.which("p4c")
    if not p4c:
        stale, why = is_stale()
        return NO_P4C, {"p4c": None, "stale": stale, "reason": why,
                        "message": "p4c not found on PATH: generated P4 sources only; "
                                   "committed p4/build outputs left unchanged"}
    version = p4c_version(p4c)
    result = compile_p4(p4c, BUILD)
    report = {"p4c": p4c, "p4c_version": version, **result}
    if result["returncode"] != 0:
        return FAILED, report
    STAMP.write_text(json.dumps({
        "sources_sha256": sources_sha256(),
        "outputs_sha256": outputs_sha256(),
        "p4c_version": version,
        "compile_seconds": result["seconds"],
        "peak_rss_mib": result["peak_rss_mib"],
        "warnings": sum(1 for line in result["output"].splitlines() if "warning" in line.lower()),
    }, indent=2) + "\n")
    report["outputs"] = [str(JSON_OUT.relative_to(REPO)), str(P4INFO_OUT.relative_to(REPO))]
    return OK, report


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``python p4/build.py [--check] [--p4c PATH] [--json]``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report whether outputs are stale")
    ap.add_argument("--p4c", help="p4c executable (default: p4c on PATH)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    code, report = build(args.p4c, args.check)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for k, v in report.items():
            print(f"{k}: {v}")
    return code


if __name__ == "__main__":
    sys.exit(main())
