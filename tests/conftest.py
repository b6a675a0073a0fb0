"""Markers for tests that need tools a fresh machine may lack; they skip with the reason."""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
from pathlib import Path

import pytest


@functools.cache
def _tofino_compiler() -> str | None:
    """The Tofino backend driver if it runs (p4/build.py decides, one rule for both)."""
    spec = importlib.util.spec_from_file_location(
        "netco_p4_build_conftest", Path(__file__).resolve().parents[1] / "p4" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.tofino_compiler()


def _missing(marker: str) -> str | None:
    if marker == "root":
        return None if os.geteuid() == 0 else "needs root (network namespaces, raw sockets)"
    if marker == "bmv2":
        return None if shutil.which("simple_switch_grpc") else "simple_switch_grpc (BMv2) not on PATH"
    if marker == "p4c":
        return None if shutil.which("p4c") else "p4c not on PATH"
    if marker == "mininet":
        ok = importlib.util.find_spec("mininet") is not None and shutil.which("brctl")
        return None if ok else "Mininet (apt-get install mininet bridge-utils) not importable"
    if marker == "tofino":
        return None if _tofino_compiler() else (
            "open-source Tofino backend of p4c not found or not runnable "
            "(NETCO_TOFINO_P4C, or p4c-tofino on PATH answering --version)"
        )
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in ("root", "bmv2", "p4c", "mininet", "tofino"):
            if item.get_closest_marker(marker):
                reason = _missing(marker)
                if reason:
                    item.add_marker(pytest.mark.skip(reason=reason))
