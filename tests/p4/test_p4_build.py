"""The committed BMv2 outputs (p4/build) are produced by one command and kept fresh."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _build_module():
    spec = importlib.util.spec_from_file_location("netco_p4_build_t", REPO / "p4" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _netco(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "host.cli.main", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)


def test_source_hash_tracks_every_p4_source_and_the_layout(tmp_path, monkeypatch):
    build = _build_module()
    names = {p.relative_to(REPO).as_posix() for p in build.source_files()}
    assert "host/protocol/layout.py" in names and "p4/gen.py" in names
    assert "p4/v1model/main.p4" in names
    assert "p4/v1model/include/control/thc_slot.p4" in names
    fake = tmp_path / "x.p4"
    fake.write_text("a")
    monkeypatch.setattr(build, "REPO", tmp_path)
    monkeypatch.setattr(build, "source_files", lambda: [fake])
    h1 = build.sources_sha256()
    fake.write_text("b")
    assert build.sources_sha256() != h1


def test_build_without_p4c_says_so_and_changes_nothing(tmp_path):
    before = {p: p.read_bytes() for p in (REPO / "p4" / "build").glob("*")}
    # A PATH with python's directory but no p4c.
    if shutil.which("p4c", path=str(Path(sys.executable).parent)):
        pytest.skip("p4c sits next to python; cannot hide it")
    proc = _netco("p4", "build", "--json", path=str(Path(sys.executable).parent))
    assert proc.returncode == 3, proc.stderr
    report = json.loads(proc.stdout)
    assert report["p4c"] is None and "p4c not found" in report["message"]
    assert {p: p.read_bytes() for p in (REPO / "p4" / "build").glob("*")} == before


@pytest.mark.p4c
def test_committed_outputs_are_fresh():
    build = _build_module()
    stale, why = build.is_stale()
    assert not stale, f"{why}: run `make -C p4` (or `netco p4 build`) and commit p4/build"
    proc = _netco("p4", "build", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.p4c
@pytest.mark.slow
def test_recompiling_reproduces_the_committed_p4info(tmp_path):
    build = _build_module()
    result = build.compile_p4(shutil.which("p4c"), tmp_path)
    assert result["returncode"] == 0, result["output"]
    committed = (REPO / "p4" / "build" / "netco.p4info.txtpb").read_text()
    assert (tmp_path / "netco.p4info.txtpb").read_text() == committed
    new = json.loads((tmp_path / "netco.json").read_text())
    old = json.loads((REPO / "p4" / "build" / "netco.json").read_text())
    assert new == old
