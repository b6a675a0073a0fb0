"""Markers for tests that need tools a fresh machine may lack; they skip with the reason.

Every test also gets its own controller state directory (``NETCO_STATE_DIR``, the job tokens
``netco controller apply`` persists: control_plane/tokens.py), so no test writes into the
user's home or sees another test's tokens; subprocesses inherit it.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os

import pytest

from host import tools
from host.paths import P4_BUILD_SCRIPT


@functools.cache
def _tofino_compiler() -> str | None:
    """The Tofino backend driver if it runs (p4/build.py decides, one rule for both)."""
    spec = importlib.util.spec_from_file_location(
        "netco_p4_build_conftest", P4_BUILD_SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.tofino_compiler()


MININET_HINT = "apt-get install mininet; ./dev.sh then links it into .venv"


def mininet_missing(search_path: list[str] | None = None) -> str | None:
    """Why real Mininet cannot be imported from ``search_path`` (default ``sys.path``), or None.

    The repository's own ``mininet/`` folder (topology files, no ``__init__.py``) is found as
    a namespace package whenever the repository root is on the path (``python -m pytest``), so
    finding *a* ``mininet`` proves nothing: Mininet is a regular package with ``mininet.net``.
    Nothing is imported (the check leaves ``sys.modules`` alone).
    """
    spec = importlib.machinery.PathFinder.find_spec("mininet", search_path)
    if spec is None:
        return f"Mininet not importable ({MININET_HINT})"
    if spec.origin is None:  # only namespace portions: folders named mininet, not the package
        where = ", ".join(spec.submodule_search_locations or [])
        return f"Mininet not importable: only the folder {where} is named mininet ({MININET_HINT})"
    if importlib.machinery.PathFinder.find_spec("net", list(spec.submodule_search_locations or [])) is None:
        return f"Mininet not importable: {spec.origin} has no mininet.net ({MININET_HINT})"
    return None


def _missing(marker: str) -> str | None:
    if marker == "root":
        return None if os.geteuid() == 0 else "needs root (network namespaces, raw sockets)"
    if marker == "bmv2":
        return tools.missing("simple_switch_grpc")
    if marker == "p4c":
        return tools.missing("p4c")
    if marker == "mininet":
        return mininet_missing() or tools.missing(*tools.MININET_TEST_TOOLS)
    if marker == "tshark":
        return tools.missing("tshark")
    if marker == "tofino":
        return None if _tofino_compiler() else (
            "open-source Tofino backend of p4c not found or not runnable "
            "(NETCO_TOFINO_P4C, or p4c-tofino on PATH answering --version)"
        )
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "tools(*binaries): runs these binaries (host.tools.TOOLS); skips naming the "
                   "Debian package of each one missing")


@pytest.fixture(autouse=True)
def _netco_state_dir(tmp_path_factory: pytest.TempPathFactory,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``NETCO_STATE_DIR`` = a fresh temporary directory for this test (outside ``tmp_path``,
    whose contents some tests list)."""
    monkeypatch.setenv("NETCO_STATE_DIR", str(tmp_path_factory.mktemp("netco-state")))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in ("root", "bmv2", "p4c", "mininet", "tofino", "tshark"):
            if item.get_closest_marker(marker):
                reason = _missing(marker)
                if reason:
                    item.add_marker(pytest.mark.skip(reason=reason))
        needed = [b for m in item.iter_markers("tools") for b in m.args]
        reason = tools.missing(*dict.fromkeys(needed)) if needed else None
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
