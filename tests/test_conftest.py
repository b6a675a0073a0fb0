"""The markers' tool checks (tests/conftest.py): a missing tool skips, with the right reason."""

from __future__ import annotations

import importlib.util

import pytest

from host.paths import REPO


@pytest.fixture(scope="module")
def conftest():
    spec = importlib.util.spec_from_file_location("netco_conftest_under_test", REPO / "tests" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_repo_mininet_folder_is_not_mininet(conftest, tmp_path):
    # The repository's mininet/ (topology files, no __init__.py) is importable as a namespace
    # package when the repository root is on sys.path, as under `python -m pytest`.
    assert (REPO / "mininet").is_dir() and not (REPO / "mininet" / "__init__.py").exists()
    reason = conftest.mininet_missing([str(REPO), str(tmp_path)])
    assert reason is not None
    assert "not importable" in reason and "apt-get install mininet" in reason


def test_nothing_on_the_path_is_missing_mininet(conftest, tmp_path):
    reason = conftest.mininet_missing([str(tmp_path)])
    assert reason is not None and "apt-get install mininet" in reason


def test_a_package_without_mininet_net_is_not_mininet(conftest, tmp_path):
    (tmp_path / "mininet").mkdir()
    (tmp_path / "mininet" / "__init__.py").write_text("")
    reason = conftest.mininet_missing([str(tmp_path)])
    assert reason is not None and "mininet.net" in reason


def test_a_real_mininet_package_is_found(conftest, tmp_path):
    # Shaped like Debian's /usr/lib/python3/dist-packages/mininet, found even when the
    # repository's folder comes first on the path (a regular package beats a namespace).
    (tmp_path / "mininet").mkdir()
    (tmp_path / "mininet" / "__init__.py").write_text("")
    (tmp_path / "mininet" / "net.py").write_text("")
    assert conftest.mininet_missing([str(REPO), str(tmp_path)]) is None


def test_the_skip_reason_names_what_is_missing(conftest, monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "mininet_missing", lambda search_path=None: None)
    monkeypatch.setenv("PATH", str(tmp_path))   # nothing on it
    reason = conftest._missing("mininet")
    assert "brctl" in reason and "ping" in reason
    assert "apt-get install bridge-utils mininet iproute2 ethtool nftables iputils-ping" in reason
    monkeypatch.setattr(conftest, "mininet_missing", lambda search_path=None: "Mininet gone")
    assert conftest._missing("mininet") == "Mininet gone"
