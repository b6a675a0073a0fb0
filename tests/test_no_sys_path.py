"""No test file changes the import path: tests import shared code as ``tests.support.<module>``.

pytest puts the repository root on the path (``pythonpath`` in pyproject.toml), so a helper
never needs ``sys.path`` edits, which make imports depend on which file ran first. The
packages, the benchmarks and the developer tools run from the installed (editable) netco and
do not edit it either; only ``p4/gen.py`` and ``p4/build.py`` do, which run without netco
installed (``python p4/gen.py`` on a machine that only builds the P4 programs).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def path_edits(source: str) -> list[int]:
    """Line numbers where ``source`` touches the import path (``sys.path``, ``from sys import
    path``, ``site.addsitedir``)."""
    names = {("sys", "path"), ("site", "addsitedir")}
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            used = {(node.value.id, node.attr)}
        elif isinstance(node, ast.ImportFrom):
            used = {(node.module, a.name) for a in node.names}
        else:
            continue
        if used & names:
            lines.append(node.lineno)
    return sorted(lines)


def test_the_check_finds_path_edits() -> None:
    bad = "import sys\nsys.path.insert(0, 'x')\nfrom sys import path\nimport site\nsite.addsitedir('y')\n"
    assert path_edits(bad) == [2, 3, 5]
    assert path_edits("import sys\nprint(sys.argv)\n") == []


def test_no_test_file_edits_the_import_path() -> None:
    offenders = [f"{p.relative_to(TESTS.parent)}:{n}" for p in sorted(TESTS.rglob("*.py"))
                 for n in path_edits(p.read_text())]
    assert offenders == [], "import from tests.support instead of editing sys.path: " + ", ".join(offenders)


def test_no_package_benchmark_or_tool_edits_the_import_path() -> None:
    files = [p for top in ("host", "control_plane", "benchmarks", "tools")
             for p in sorted((REPO / top).rglob("*.py"))]
    assert len(files) > 100
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in files for n in path_edits(p.read_text())]
    assert offenders == [], "use the installed netco (./dev.sh) instead of editing sys.path: " + \
        ", ".join(offenders)


def imported_test_modules(source: str) -> list[str]:
    """Modules ``source`` imports that are test modules (``test_*``), relative ones included."""
    out = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        out += [n for n in names if n.rsplit(".", 1)[-1].startswith("test_")]
    return out


def test_the_check_finds_test_imports() -> None:
    src = "from .test_a import x\nimport tests.p4.test_b\nfrom tests.support.jobs import TABLE\n"
    assert imported_test_modules(src) == ["test_a", "tests.p4.test_b"]


def test_no_test_file_imports_another() -> None:
    offenders = [f"{p.relative_to(REPO)}: {m}" for p in sorted(TESTS.rglob("*.py"))
                 for m in imported_test_modules(p.read_text())]
    assert offenders == [], "move shared test code into tests/support: " + ", ".join(offenders)
