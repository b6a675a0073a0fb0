"""The C extensions are compiled against the generated layout header, and a build against
another header is refused loudly (never silently switched off)."""

from __future__ import annotations

import types

import pytest

from host.protocol import generated_dataplane as dp
from host.softswitch.controls import native


def test_a_stale_fast_path_is_refused(monkeypatch):
    monkeypatch.setattr(native, "_fastpath", types.SimpleNamespace(LAYOUT_HASH="0" * 16))
    monkeypatch.delenv("NETCO_SOFTSWITCH_C", raising=False)
    with pytest.raises(ImportError, match="rebuild it"):
        native._native_enabled()
    monkeypatch.setattr(native, "_fastpath", types.SimpleNamespace())   # built before the hash
    with pytest.raises(ImportError, match="another frame layout"):
        native._native_enabled()


def test_switched_off_or_absent_is_not_an_error(monkeypatch):
    monkeypatch.setattr(native, "_fastpath", types.SimpleNamespace(LAYOUT_HASH="0" * 16))
    monkeypatch.setenv("NETCO_SOFTSWITCH_C", "0")
    assert native._native_enabled() is False
    monkeypatch.setattr(native, "_fastpath", None)
    monkeypatch.delenv("NETCO_SOFTSWITCH_C")
    assert native._native_enabled() is False


def test_built_extensions_carry_the_generated_layout():
    fast = pytest.importorskip("host.softswitch._fastpath")
    loop = pytest.importorskip("host.transport._slotloop")
    assert fast.LAYOUT_HASH == loop.LAYOUT_HASH == dp.LAYOUT_HASH
