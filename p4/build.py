#!/usr/bin/env python3
"""Build the netco P4 programs: generate, compile, record a stamp per target.

Steps: run ``p4/gen.py``; then, per target:

* ``v1model`` (BMv2): if ``p4c`` is on PATH (or ``--p4c`` names it) compile
  ``p4/v1model/main.p4`` into ``p4/build/netco.json`` and ``p4/build/netco.p4info.txtpb`` and
  write ``p4/build/stamp.json`` (the sources' hash and the compiler version). Without p4c it
  says so and exits 3 (the committed outputs stay as they are).
* ``tofino`` / ``tofino2`` (TNA / T2NA): if the open-source Tofino backend of p4c is found
  (``NETCO_TOFINO_P4C`` or ``p4c-tofino`` on PATH) compile ``p4/tna/main.p4`` and keep, under
  ``p4/build/<target>/``, the P4Info, the compiler's resource report and a summary of it
  (``resources.json``) and a stamp. The binary (``tofino.bin``) is not kept.

``--target all`` builds every target whose compiler is present and says which were skipped.
``--check`` compiles nothing: it exits 1 when committed outputs are stale (a stamp's source
hash differs from the current sources), 0 when fresh. A stamp hashes exactly the ``.p4``
files the compiler reads. ``--restamp`` is the one-time migration from the older stamps, which
also hashed ``p4/gen.py`` and ``host/protocol/layout.py``.

Used by ``make -C p4`` (all targets) and ``netco p4 build``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
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

TNA_MAIN = HERE / "tna" / "main.p4"
#: Tofino targets and their architectures (p4c --target T --arch A).
TNA_TARGETS = {"tofino": "tna", "tofino2": "t2na"}
TARGETS = ("v1model", *TNA_TARGETS)

#: exit codes
OK, STALE, FAILED, NO_P4C = 0, 1, 2, 3


def source_files() -> list[Path]:
    """The files the compiler reads for v1model: every ``.p4`` under ``p4/v1model`` and
    ``p4/shared`` (the generated ones included).

    ``p4/gen.py`` and ``host/protocol/layout.py`` are not listed: the compiled outputs depend
    on them only through the generated ``.p4`` files, and a change to the generator that would
    change those shows up as "generated files stale" (``gen.py --check``).
    """
    return sorted((HERE / "v1model").rglob("*.p4")) + sorted((HERE / "shared").rglob("*.p4"))


def _sha(files: list[Path]) -> str:
    """Hash over the relative paths (to the repository) and contents of ``files``."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(REPO)).encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def sources_sha256() -> str:
    """Hash over the relative paths and contents of :func:`source_files`."""
    return _sha(source_files())


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


def run_compiler(name: str, cmd: list[str]) -> dict:
    """Run a compiler command from ``p4/`` (relative source paths, so outputs do not depend on
    where the repository lives); returns its command line (as ``name ...``), exit status,
    seconds, peak memory and output."""
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - t0
    # Peak RSS of the largest child so far (the compiler's backend dominates), in MiB.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {
        "command": " ".join([name, *cmd[1:]]),
        "returncode": proc.returncode,
        "seconds": round(seconds, 1),
        "peak_rss_mib": round(peak),
        "output": (proc.stdout + proc.stderr).strip(),
    }


def compile_p4(p4c: str, outdir: Path) -> dict:
    """Compile main.p4 into ``outdir`` (netco.json, netco.p4info.txtpb); returns timing/output.

    Runs from ``p4/`` with relative paths so the JSON's source references do not depend on
    where the repository lives.
    """
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="netco-p4c-") as tmp:
        result = run_compiler("p4c", [p4c, "--target", "bmv2", "--arch", "v1model", "--std",
                                      "p4-16", "-o", tmp, "--p4runtime-files",
                                      str(Path(tmp) / "netco.p4info.txtpb"),
                                      str(MAIN.relative_to(HERE))])
        if result["returncode"] == 0:
            # The JSON names the preprocessed file in the temporary directory; keep the
            # committed output independent of it (reproducible builds).
            text = (Path(tmp) / "main.json").read_text()
            (outdir / JSON_OUT.name).write_text(text.replace(f"{tmp}/", ""))
            shutil.copyfile(Path(tmp) / "netco.p4info.txtpb", outdir / P4INFO_OUT.name)
    return result


def _without_compiler(missing: str, outdir: str, stale: bool, why: str, report: dict,
                      fix: str) -> tuple[int, dict]:
    """No compiler: fine (OK) while the committed outputs match the sources, else NO_P4C."""
    if stale:
        msg = f"{missing}: {why}, and it cannot be recompiled here; {fix}"
        return NO_P4C, {**report, "stale": True, "reason": why, "message": msg}
    msg = (f"{missing}: nothing to compile, the committed {outdir} outputs match the "
           "sources")
    return OK, {**report, "stale": False, "reason": why, "message": msg, "skipped": True}


def release(version: str) -> str:
    """The compiler's name and release of a ``--version`` line, without what describes one
    build of it (``p4c 1.2.4.8 (SHA: 32893b7e8 BUILD: Release)`` -> ``p4c 1.2.4.8``): a build
    from a git checkout and one from an export of the same release write the same outputs."""
    return " ".join(version.split("(")[0].split()[:2])


def write_stamp(path: Path, sources: str, outputs: str, version: str, result: dict) -> bool:
    """Write a target's stamp after a successful compile; returns whether the file changed.

    A rebuild that reproduces the committed build (same sources, same outputs, same compiler
    release: :func:`release`) keeps the committed stamp as it is: its timing fields describe
    the compile that produced the outputs, and a check-out stays clean after ``make -C p4`` on
    a machine with p4c.
    """
    identity = {"sources_sha256": sources, "outputs_sha256": outputs, "p4c_version": version}
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = {}
    same = {**identity, "p4c_version": release(version)}
    if all((release(old.get(k, "")) if k == "p4c_version" else old.get(k)) == v
           for k, v in same.items()):
        return False
    path.write_text(json.dumps({
        **identity,
        "compile_seconds": result["seconds"],
        "peak_rss_mib": result["peak_rss_mib"],
        "warnings": sum(1 for line in result["output"].splitlines() if "warning" in line.lower()),
    }, indent=2) + "\n")
    return True


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
        return _without_compiler("p4c not found on PATH", "p4/build", stale, why,
                                 {"p4c": None}, "install p4c or pass --p4c")
    version = p4c_version(p4c)
    result = compile_p4(p4c, BUILD)
    report = {"p4c": p4c, "p4c_version": version, **result}
    if result["returncode"] != 0:
        return FAILED, report
    write_stamp(STAMP, sources_sha256(), outputs_sha256(), version, result)
    report["outputs"] = [str(JSON_OUT.relative_to(REPO)), str(P4INFO_OUT.relative_to(REPO))]
    return OK, report


# -- TNA (Tofino, Tofino2) ----------------------------------------------------------------
def tna_source_files() -> list[Path]:
    """The files the compiler reads for TNA / T2NA: every ``.p4`` under ``p4/tna`` and
    ``p4/shared`` (see :func:`source_files`)."""
    return sorted((HERE / "tna").rglob("*.p4")) + sorted((HERE / "shared").rglob("*.p4"))


def tna_dir(target: str) -> Path:
    """Where the committed outputs of a Tofino target live."""
    return BUILD / target


def tna_outputs(target: str) -> list[Path]:
    """The committed compiler outputs of ``target`` (P4Info, resource report and summary)."""
    d = tna_dir(target)
    return [d / "netco.p4info.txtpb", d / "resources.json", d / "resources.log"]


def tna_is_stale(target: str) -> tuple[bool, str]:
    """Whether ``p4/build/<target>`` lags the TNA sources, and why."""
    stamp_path = tna_dir(target) / "stamp.json"
    outs = tna_outputs(target)
    if not stamp_path.exists() or not all(p.exists() for p in outs):
        return True, f"p4/build/{target} has no compiled outputs or no stamp.json"
    stamp = json.loads(stamp_path.read_text())
    if stamp.get("sources_sha256") != _sha(tna_source_files()):
        return True, f"sources changed since p4/build/{target} was compiled (stamp hash differs)"
    if stamp.get("outputs_sha256") != _sha(outs):
        return True, f"p4/build/{target} outputs differ from what the compiler wrote"
    return False, f"p4/build/{target} is up to date"


def tofino_compiler() -> str | None:
    """The open-source Tofino backend's driver, if it is installed and runs.

    ``NETCO_TOFINO_P4C`` names it, else ``p4c-tofino`` on PATH; it must answer
    ``--version`` with exit status 0 (a wrapper left by an unfinished build does not).
    """
    cand = os.environ.get("NETCO_TOFINO_P4C") or shutil.which("p4c-tofino")
    if not cand:
        return None
    try:
        out = subprocess.run([cand, "--version"], capture_output=True, text=True, timeout=60,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return cand if out.returncode == 0 else None


def summarize_resources(outdir: Path) -> dict:
    """Stages, tables and memories the compiled program uses, from the compiler's logs.

    Reads ``<outdir>/**/logs/resources.json`` when present (per-stage SRAM, TCAM, map RAM,
    stateful ALUs, exact/ternary crossbar bytes, VLIW slots) and ``mau.resources.log`` (the
    human-readable per-stage table); returns what it found.
    """
    summary: dict = {}
    res = next(iter(sorted(outdir.rglob("resources.json"))), None)
    if res is not None:
        mau = json.loads(res.read_text()).get("resources", {}).get("mau", {})
        stages = mau.get("mau_stages", [])
        summary["stages_available"] = mau.get("nStages", len(stages))
        per_stage = []
        for st in stages:
            rams = st.get("rams", {})
            row = {
                "stage": st.get("stage_number"),
                "sram_blocks": len(rams.get("srams", [])),
                "sram_available": rams.get("nRows", 0) * rams.get("nColumns", 0),
                "tcam_blocks": len(st.get("tcams", {}).get("tcams", [])),
                "map_rams": len(st.get("map_rams", {}).get("maprams", [])),
                "stateful_alus": len(st.get("meter_alus", {}).get("meters", [])),
                "logical_tables": len(st.get("logical_tables", {}).get("ids", [])),
                "gateways": len(st.get("gateways", {}).get("gateways", [])),
            }
            per_stage.append(row)
        summary["per_stage"] = per_stage
        summary["stages_used"] = sum(1 for r in per_stage if r["logical_tables"] > 0)
        summary["totals"] = {k: sum(r[k] for r in per_stage)
                             for k in ("sram_blocks", "tcam_blocks", "map_rams", "stateful_alus",
                                       "logical_tables", "gateways")}
    log = next(iter(sorted(outdir.rglob("mau.resources.log"))), None)
    if log is not None:
        summary["resource_log"] = log.name
    return summary


def resource_table(summary: dict) -> str:
    """The per-stage resource use of :func:`summarize_resources` as a text table."""
    cols = ("stage", "logical_tables", "gateways", "sram_blocks", "tcam_blocks", "map_rams",
            "stateful_alus")
    lines = ["  ".join(f"{c:>14}" for c in cols)]
    for r in summary.get("per_stage", []):
        lines.append("  ".join(f"{r.get(c, ''):>14}" for c in cols))
    tot = summary.get("totals", {})
    lines.append("  ".join(f"{('total' if c == 'stage' else tot.get(c, '')):>14}" for c in cols))
    return "\n".join(lines) + "\n"


def compile_tna(p4c: str, target: str, outdir: Path) -> dict:
    """Compile ``p4/tna/main.p4`` for ``target`` into ``outdir``; returns timing/output."""
    arch = TNA_TARGETS[target]
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"netco-{target}-") as tmp:
        info = Path(tmp) / "netco.p4info.txtpb"
        # -g: the compiler writes its resource logs (logs/resources.json) only with it.
        result = run_compiler("p4c-tofino", [p4c, "--target", target, "--arch", arch, "--std",
                                             "p4-16", "-g", "-o", tmp, "--p4runtime-files",
                                             str(info), str(TNA_MAIN.relative_to(HERE))])
        if result["returncode"] == 0:
            summary = summarize_resources(Path(tmp))
            # The assembler's output: the device binary (kept out of the repository; its size
            # says that the whole toolchain, bfas included, accepted the program).
            binary = next(iter(sorted(Path(tmp).rglob(f"{target}.bin"))), None)
            summary["binary"] = None if binary is None else {
                "file": binary.name, "bytes": binary.stat().st_size}
            summary["fits"] = (binary is not None
                               and summary.get("stages_used", 0) <= summary.get("stages_available", 0))
            shutil.copyfile(info, outdir / "netco.p4info.txtpb")
            (outdir / "resources.log").write_text(resource_table(summary))
            (outdir / "resources.json").write_text(json.dumps(summary, indent=2) + "\n")
            result["resources"] = {k: v for k, v in summary.items() if k != "per_stage"}
    return result


def build_tna(target: str, p4c: str | None = None, check: bool = False) -> tuple[int, dict]:
    """Build (or check) one Tofino target; returns (exit code, report)."""
    if check:
        stale, why = tna_is_stale(target)
        return (STALE if stale else OK), {"target": target, "stale": stale, "reason": why}
    p4c = p4c or tofino_compiler()
    if not p4c:
        stale, why = tna_is_stale(target)
        return _without_compiler("the open-source Tofino backend of p4c was not found",
                                 f"p4/build/{target}", stale, why, {"target": target, "p4c": None},
                                 "set NETCO_TOFINO_P4C or put p4c-tofino on PATH")
    version = p4c_version(p4c)
    result = compile_tna(p4c, target, tna_dir(target))
    report = {"target": target, "p4c": p4c, "p4c_version": version, **result}
    if result["returncode"] != 0:
        return FAILED, report
    if not result["resources"].get("fits"):
        res = result["resources"]
        report["message"] = (f"{target}: the program does not fit: {res.get('stages_used')} stages "
                             f"used of {res.get('stages_available')}, binary "
                             f"{'written' if res.get('binary') else 'not written'} "
                             f"(see {tna_dir(target).relative_to(REPO)}/resources.log)")
        return FAILED, report
    outs = tna_outputs(target)
    write_stamp(tna_dir(target) / "stamp.json", _sha(tna_source_files()), _sha(outs), version,
                result)
    report["outputs"] = [str(p.relative_to(REPO)) for p in outs]
    return OK, report


# -- one-time migration of the stamps' source set ------------------------------------------
#: The generator files the stamps hashed before they hashed only the ``.p4`` inputs.
_OLD_EXTRA = ("p4/gen.py", "host/protocol/layout.py")


def _old_source_files(target: str) -> list[Path]:
    """The source set of the old stamps (the ``.p4`` inputs plus ``_OLD_EXTRA``)."""
    files = source_files() if target == "v1model" else tna_source_files()
    return files + [REPO / f for f in _OLD_EXTRA]


def restamp(target: str) -> tuple[int, dict]:
    """Rewrite ``target``'s stamp with the new source hash, if its old hash proves the ``.p4``
    inputs are unchanged since the compile.

    The old hash (``.p4`` files plus ``p4/gen.py`` and ``host/protocol/layout.py``) is
    recomputed from the current files; only when it equals the committed stamp's
    ``sources_sha256`` is that field replaced by :func:`_sha` of the ``.p4`` inputs alone
    (every other field is kept). A stamp already carrying the new hash is left alone.
    """
    stamp_path = STAMP if target == "v1model" else tna_dir(target) / "stamp.json"
    if not stamp_path.exists():
        return STALE, {"target": target, "restamped": False, "reason": "no stamp.json"}
    stamp = json.loads(stamp_path.read_text())
    new = _sha(source_files() if target == "v1model" else tna_source_files())
    if stamp.get("sources_sha256") == new:
        return OK, {"target": target, "restamped": False, "reason": "stamp already current"}
    if stamp.get("sources_sha256") != _sha(_old_source_files(target)):
        return STALE, {"target": target, "restamped": False,
                       "reason": "the old source hash does not match the stamp: the sources "
                                 "changed since the compile; recompile instead"}
    stamp["sources_sha256"] = new
    stamp_path.write_text(json.dumps(stamp, indent=2) + "\n")
    return OK, {"target": target, "restamped": True,
                "reason": "stamp rewritten with the hash of the .p4 inputs"}


def build_targets(targets: list[str], p4c: str | None = None, p4c_tofino: str | None = None,
                  check: bool = False) -> tuple[int, dict]:
    """Build several targets; a Tofino target without its compiler is skipped, not failed,
    when more than one target is asked for. Returns (worst exit code, {target: report})."""
    reports: dict = {}
    codes: list[int] = []
    for tg in targets:
        if tg == "v1model":
            code, rep = build(p4c, check)
        else:
            code, rep = build_tna(tg, p4c_tofino, check)
            if code == NO_P4C and len(targets) > 1:
                rep["skipped"] = True
                code = OK
        reports[tg] = rep
        codes.append(code)
    worst = max(codes, key=lambda c: (c != OK, c))
    return worst, reports


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point
    (``python p4/build.py [--target T|all] [--check] [--p4c PATH] [--json]``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="v1model", choices=[*TARGETS, "all"],
                    help="what to build (default v1model; all: every target whose compiler "
                         "is present)")
    ap.add_argument("--check", action="store_true", help="only report whether outputs are stale")
    ap.add_argument("--p4c", help="p4c executable for v1model (default: p4c on PATH)")
    ap.add_argument("--p4c-tofino", help="Tofino backend driver (default: NETCO_TOFINO_P4C or "
                                         "p4c-tofino on PATH)")
    ap.add_argument("--restamp", action="store_true",
                    help="one-time migration: rewrite the stamp's source hash over the .p4 "
                         "inputs only, if the old hash (which also covered gen.py and "
                         "layout.py) still matches")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    if args.restamp:
        targets = list(TARGETS) if args.target == "all" else [args.target]
        results = [restamp(tg) for tg in targets]
        reports = {tg: rep for tg, (_, rep) in zip(targets, results, strict=True)}
        if args.json:
            print(json.dumps(reports, indent=2))
        else:
            for tg, rep in reports.items():
                print(f"{tg}: {rep['reason']}")
        return max(code for code, _ in results)
    if args.target != "v1model":
        targets = list(TARGETS) if args.target == "all" else [args.target]
        code, reports = build_targets(targets, args.p4c, args.p4c_tofino, args.check)
        if args.json:
            print(json.dumps(reports, indent=2))
        else:
            _print_reports(reports)
        return code
    code, report = build(args.p4c, args.check)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_reports({"v1model": report})
    return code


def _print_reports(reports: dict) -> None:
    """One line per target (and the compiler's output when it failed)."""
    for tg, rep in reports.items():
        if "message" in rep:
            print(f"{tg}: {rep['message']}")
        elif "returncode" in rep:
            print(f"{tg}: {rep.get('p4c_version', rep.get('p4c'))}: exit {rep['returncode']} "
                  f"after {rep.get('seconds')} s" + "".join(f", wrote {o}" for o in rep.get("outputs", [])))
            if rep["returncode"] != 0 and rep.get("output"):
                print("  " + rep["output"][-4000:].replace("\n", "\n  "))
        else:
            print(f"{tg}: {'STALE' if rep.get('stale') else 'fresh'}: {rep.get('reason')}")


if __name__ == "__main__":
    sys.exit(main())
