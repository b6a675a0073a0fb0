"""Markers for tests that need tools a fresh machine may lack; they skip with the reason."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest


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
        return None if shutil.which("p4c-tofino") or os.environ.get("NETCO_TOFINO_P4C") else (
            "open-source Tofino backend of p4c not found (p4c-tofino / NETCO_TOFINO_P4C)"
        )
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in ("root", "bmv2", "p4c", "mininet", "tofino"):
            if item.get_closest_marker(marker):
                reason = _missing(marker)
                if reason:
                    item.add_marker(pytest.mark.skip(reason=reason))
