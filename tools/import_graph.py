#!/usr/bin/env python3
"""Package-level import graph of netco, and the imports that point the wrong way.

Dependencies point one way: application layer -> ``control_plane`` -> ``host`` ->
``host.protocol``. This script parses every ``*.py`` under ``host/``, ``control_plane/`` and
``benchmarks/`` (statically, with :mod:`ast`; function-level imports included, nothing is
imported) and groups modules into packages:

* ``host.protocol`` — the wire protocol (layer 0);
* ``host.<sub>`` and ``host`` (its top-level modules) — the host library (layer 1);
* ``control_plane.<sub>`` and ``control_plane`` — the controller, testbed, planners (layer 2);
* ``control_plane.cli`` and ``benchmarks`` — the application layer (layer 3).

An import from a lower layer into a higher one (``host`` -> ``control_plane``,
``host.protocol`` -> any other ``host`` package, ...) is a violation. Run from anywhere::

    python tools/import_graph.py            # table of package -> package edges, violations last
    python tools/import_graph.py --json     # the same as one JSON object
    python tools/import_graph.py --check    # exit 1 when an import points the wrong way

``tests/test_layering.py`` runs :func:`violations` on the repository.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Top-level folders scanned; the first two are packages, ``benchmarks`` holds scripts.
ROOTS = ("host", "control_plane", "benchmarks")
LAYERS = {0: "host.protocol", 1: "host", 2: "control_plane", 3: "application"}


@dataclass(frozen=True)
class Import:
    """One import statement: ``module`` (importer) imports ``target`` at ``path:line``."""

    module: str
    target: str
    path: str
    line: int


def module_name(path: Path, repo: Path) -> str:
    """Dotted name of the file ``path`` (``host/thc/__init__.py`` -> ``host.thc``)."""
    parts = list(path.relative_to(repo).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str, repo: Path) -> bool:
    base = repo.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, repo: Path = REPO) -> list[Import]:
    """Every import of project code (``host``, ``control_plane``) in the file ``path``."""
    mod = module_name(path, repo)
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = str(path.relative_to(repo))
    found: list[Import] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            # ``from host import thc`` imports the module host.thc; ``from host.x import f`` host.x.
            targets = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}", repo) else base
                       for a in node.names]
        for t in dict.fromkeys(targets):  # one per statement and module
            if t.split(".")[0] in ("host", "control_plane"):
                found.append(Import(mod, t, rel, node.lineno))
    return found


def group(module: str, repo: Path = REPO) -> str:
    """The package a module belongs to in the graph (``host.thc.codec`` -> ``host.thc``)."""
    parts = module.split(".")
    if parts[0] == "benchmarks":
        return "benchmarks"
    if len(parts) >= 2 and (Path(repo, *parts[:2]) / "__init__.py").is_file():
        return ".".join(parts[:2])
    return parts[0]


def layer(pkg: str) -> int:
    """Layer of a package (0: host.protocol ... 3: application)."""
    if pkg == "host.protocol":
        return 0
    if pkg == "host" or pkg.startswith("host."):
        return 1
    if pkg in ("control_plane.cli", "benchmarks"):
        return 3
    return 2


def scan(repo: Path = REPO) -> list[Import]:
    """All project imports under :data:`ROOTS` of ``repo``."""
    out: list[Import] = []
    for root in ROOTS:
        for path in sorted((repo / root).rglob("*.py")):
            out.extend(sorted(imports_of(path, repo), key=lambda i: i.line))
    return out


def violations(imports: list[Import], repo: Path = REPO) -> list[Import]:
    """The imports that point from a lower layer into a higher one."""
    return [i for i in imports if layer(group(i.target, repo)) > layer(group(i.module, repo))]


def edges(imports: list[Import], repo: Path = REPO) -> Counter[tuple[str, str]]:
    """(from package, to package) -> number of import statements, within a package left out."""
    pairs = ((group(i.module, repo), group(i.target, repo)) for i in imports)
    return Counter((a, b) for a, b in pairs if a != b)


def report(imports: list[Import], repo: Path = REPO) -> dict:
    """The graph as one JSON-able object."""
    e = edges(imports, repo)
    bad = violations(imports, repo)
    layer_edges = Counter((LAYERS[layer(a)], LAYERS[layer(b)]) for (a, b), n in e.items()
                          for _ in range(n))
    return {
        "packages": {p: LAYERS[layer(p)] for p in sorted({p for ab in e for p in ab})},
        "edges": [{"from": a, "to": b, "imports": n, "ok": layer(b) <= layer(a)}
                  for (a, b), n in sorted(e.items())],
        "layers": [{"from": a, "to": b, "imports": n} for (a, b), n in sorted(layer_edges.items())],
        "violations": [{"module": i.module, "imports": i.target, "at": f"{i.path}:{i.line}"}
                       for i in bad],
    }


def print_table(rep: dict) -> None:
    w = max([len(e["from"]) for e in rep["edges"]] + [12])
    print(f"{'from':<{w}}  {'to':<{w}}  imports  direction")
    for e in rep["edges"]:
        print(f"{e['from']:<{w}}  {e['to']:<{w}}  {e['imports']:>7}  {'ok' if e['ok'] else 'WRONG WAY'}")
    print()
    print(f"{'layer from':<14}  {'layer to':<14}  imports")
    for e in rep["layers"]:
        print(f"{e['from']:<14}  {e['to']:<14}  {e['imports']:>7}")
    print()
    print(f"{len(rep['violations'])} import(s) point the wrong way")
    for v in rep["violations"]:
        print(f"  {v['at']}: {v['module']} imports {v['imports']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--check", action="store_true", help="exit 1 when an import points the wrong way")
    p.add_argument("--repo", type=Path, default=REPO, metavar="DIR",
                   help="repository to read (default: the one this script is in)")
    args = p.parse_args(argv)
    rep = report(scan(args.repo), args.repo)
    if args.json:
        print(json.dumps(rep, indent=1))
    else:
        print_table(rep)
    return 1 if args.check and rep["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
