"""Dependencies point one way: application layer -> control_plane -> host -> host.protocol.

Static: every ``*.py`` under ``host/``, ``control_plane/`` and ``benchmarks/`` is parsed
(:mod:`ast`, function-level imports included) by ``tools/import_graph.py``; nothing is imported.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from host.paths import REPO


@pytest.fixture(scope="module")
def graph() -> ModuleType:
    spec = importlib.util.spec_from_file_location("netco_import_graph", REPO / "tools" / "import_graph.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def imports(graph) -> list:
    return graph.scan(REPO)


def _where(imports) -> str:
    return "; ".join(f"{i.path}:{i.line} imports {i.target}" for i in imports)


def test_host_never_imports_control_plane(imports):
    found = [i for i in imports if i.module.split(".")[0] == "host"]
    assert len(found) > 50  # the scan sees host's own imports
    bad = [i for i in found if i.target.split(".")[0] == "control_plane"]
    assert not bad, f"host must not import control_plane (move the code up a layer): {_where(bad)}"


def test_protocol_imports_nothing_else_of_host(imports):
    found = [i for i in imports if i.module.startswith("host.protocol")]
    bad = [i for i in found if not (i.target == "host.protocol" or i.target.startswith("host.protocol."))]
    assert not bad, f"host.protocol imports only itself: {_where(bad)}"


def test_no_import_points_the_wrong_way(graph, imports):
    bad = graph.violations(imports, REPO)
    assert not bad, f"imports from a lower layer into a higher one: {_where(bad)}"


def test_the_scan_sees_function_level_and_relative_imports(graph, tmp_path):
    """A wrong-way import hidden in a function or written relative is still caught."""
    for d in ("host", "host/protocol", "host/thc", "control_plane", "control_plane/cli"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "__init__.py").write_text("")
    (tmp_path / "control_plane" / "embedded.py").write_text("")
    (tmp_path / "host" / "thc" / "codec.py").write_text("")
    (tmp_path / "host" / "demo.py").write_text(
        "import os\n\n\ndef run():\n    from control_plane.embedded import EmbeddedNetwork\n")
    (tmp_path / "host" / "protocol" / "layout.py").write_text("from ..thc import codec\n")
    (tmp_path / "control_plane" / "cli" / "main.py").write_text("import host.demo\nfrom .. import embedded\n")
    imports = graph.scan(tmp_path)
    assert {(i.module, i.target) for i in imports} == {
        ("host.demo", "control_plane.embedded"),
        ("host.protocol.layout", "host.thc.codec"),
        ("control_plane.cli.main", "host.demo"),
        ("control_plane.cli.main", "control_plane.embedded"),
    }
    bad = graph.violations(imports, tmp_path)
    assert {(i.path, i.line) for i in bad} == {("host/demo.py", 5), ("host/protocol/layout.py", 1)}
    assert graph.main(["--check", "--repo", str(tmp_path)]) == 1
