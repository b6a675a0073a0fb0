"""No test file changes the import path: tests import shared code as ``tests.support.<module>``.

pytest puts the repository root on the path (``pythonpath`` in pyproject.toml), so a helper
never needs ``sys.path`` edits, which make imports depend on which file ran first.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


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
