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
    return subprocess.run([sys.executable, "-m", "control_plane.cli.main", *args], cwd=REPO, env=env,
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


def test_stamp_detects_edited_outputs(tmp_path, monkeypatch):
    build = _build_module()
    out_json, out_info = tmp_path / "netco.json", tmp_path / "netco.p4info.txtpb"
    out_json.write_text("{}")
    out_info.write_text("")
    monkeypatch.setattr(build, "JSON_OUT", out_json)
    monkeypatch.setattr(build, "P4INFO_OUT", out_info)
    monkeypatch.setattr(build, "STAMP", tmp_path / "stamp.json")
    (tmp_path / "stamp.json").write_text(json.dumps(
        {"sources_sha256": build.sources_sha256(), "outputs_sha256": build.outputs_sha256()}))
    assert build.is_stale() == (False, "p4/build is up to date")
    out_json.write_text('{"edited": 1}')
    stale, why = build.is_stale()
    assert stale and "outputs differ" in why


def test_build_without_p4c_says_so_and_changes_nothing(tmp_path):
    before = {p: p.read_bytes() for p in (REPO / "p4" / "build").rglob("*") if p.is_file()}
    # A PATH with python's directory but no p4c.
    if shutil.which("p4c", path=str(Path(sys.executable).parent)):
        pytest.skip("p4c sits next to python; cannot hide it")
    proc = _netco("p4", "build", "--json", path=str(Path(sys.executable).parent))
    assert proc.returncode == 3, proc.stderr
    report = json.loads(proc.stdout)
    assert report["p4c"] is None and "p4c not found" in report["message"]
    assert {p: p.read_bytes() for p in (REPO / "p4" / "build").rglob("*") if p.is_file()} == before


@pytest.mark.p4c
def test_committed_outputs_are_fresh():
    build = _build_module()
    stale, why = build.is_stale()
    assert not stale, f"{why}: run `make -C p4` (or `netco p4 build`) and commit p4/build"
    proc = _netco("p4", "build", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
