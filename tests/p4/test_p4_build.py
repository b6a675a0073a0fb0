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

from host.paths import P4_BUILD, REPO


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


def test_source_hash_covers_exactly_the_p4_files_the_compiler_reads(tmp_path, monkeypatch):
    build = _build_module()
    names = {p.relative_to(REPO).as_posix() for p in build.source_files()}
    assert all(n.endswith(".p4") for n in names), names
    assert "p4/v1model/main.p4" in names
    assert "p4/v1model/include/control/thc_slot.p4" in names
    assert "p4/shared/generated_protocol.p4" in names
    tna = {p.relative_to(REPO).as_posix() for p in build.tna_source_files()}
    assert all(n.endswith(".p4") for n in tna) and "p4/tna/main.p4" in tna
    assert "p4/shared/generated_protocol.p4" in tna and not any("v1model" in n for n in tna)
    fake = tmp_path / "x.p4"
    fake.write_text("a")
    monkeypatch.setattr(build, "REPO", tmp_path)
    monkeypatch.setattr(build, "source_files", lambda: [fake])
    h1 = build.sources_sha256()
    fake.write_text("b")
    assert build.sources_sha256() != h1


def test_restamp_only_when_the_old_hash_matches(tmp_path, monkeypatch):
    build = _build_module()
    (tmp_path / "p4").mkdir()
    src, extra = tmp_path / "p4" / "a.p4", tmp_path / "p4" / "gen.py"
    src.write_text("control C() {}")
    extra.write_text("# generator")
    monkeypatch.setattr(build, "REPO", tmp_path)
    monkeypatch.setattr(build, "STAMP", tmp_path / "stamp.json")
    monkeypatch.setattr(build, "source_files", lambda: [src])
    monkeypatch.setattr(build, "_OLD_EXTRA", ("p4/gen.py",))
    old = build._sha([src, extra])
    (tmp_path / "stamp.json").write_text(json.dumps({"sources_sha256": old, "p4c_version": "x"}))
    src.write_text("control C() { /* edited */ }")
    code, rep = build.restamp("v1model")
    assert code == build.STALE and not rep["restamped"]
    assert json.loads((tmp_path / "stamp.json").read_text())["sources_sha256"] == old
    src.write_text("control C() {}")
    code, rep = build.restamp("v1model")
    assert code == build.OK and rep["restamped"]
    assert json.loads((tmp_path / "stamp.json").read_text()) == {
        "sources_sha256": build._sha([src]), "p4c_version": "x"}


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


def test_a_rebuild_that_reproduces_the_outputs_keeps_the_stamp(tmp_path):
    build = _build_module()
    stamp = tmp_path / "stamp.json"
    first = {"seconds": 39.8, "peak_rss_mib": 625, "output": ""}
    assert build.write_stamp(stamp, "src", "out", "p4c 1.2.4.8", first)
    before = stamp.read_bytes()
    again = {"seconds": 51.2, "peak_rss_mib": 640, "output": "warning: x"}
    assert not build.write_stamp(stamp, "src", "out", "p4c 1.2.4.8", again)
    assert stamp.read_bytes() == before
    # other outputs (or another compiler) do rewrite it, with the new compile's figures
    assert build.write_stamp(stamp, "src", "out2", "p4c 1.2.4.8", again)
    assert json.loads(stamp.read_text())["compile_seconds"] == 51.2


def test_build_without_p4c_says_so_and_changes_nothing(tmp_path):
    before = {p: p.read_bytes() for p in P4_BUILD.rglob("*") if p.is_file()}
    # A PATH with python's directory but no p4c.
    if shutil.which("p4c", path=str(Path(sys.executable).parent)):
        pytest.skip("p4c sits next to python; cannot hide it")
    proc = _netco("p4", "build", "--json", path=str(Path(sys.executable).parent))
    # The committed outputs match the sources (test_committed_outputs_are_fresh): no error.
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["p4c"] is None and "p4c not found" in report["message"]
    assert "nothing to compile" in report["message"]
    assert {p: p.read_bytes() for p in P4_BUILD.rglob("*") if p.is_file()} == before


def test_make_without_p4c_exits_0_when_fresh_and_uses_the_python_on_path():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    if shutil.which("p4c", path=env["PATH"]) or shutil.which("p4c-tofino", path=env["PATH"]):
        pytest.skip("a P4 compiler is on PATH; cannot test its absence")
    env.pop("NETCO_TOFINO_P4C", None)
    proc = subprocess.run(["make", "-s", "-C", str(REPO / "p4")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["v1model", "tofino", "tofino2"], proc.stdout
    assert all("nothing to compile" in line for line in lines)


def test_build_without_p4c_fails_when_outputs_are_stale(monkeypatch):
    build = _build_module()
    monkeypatch.setattr(build.shutil, "which", lambda name, *a, **k: None)
    monkeypatch.setattr(build, "is_stale", lambda: (True, "p4/build outputs differ"))
    code, report = build.build(None)
    assert code == build.NO_P4C
    assert report["message"].startswith("p4c not found on PATH: p4/build outputs differ")
    assert "install p4c" in report["message"]


@pytest.mark.parametrize("target", ("v1model", "tofino", "tofino2"))
def test_committed_outputs_are_fresh(target):
    """The stamp's hash of the .p4 inputs matches the sources: needs no compiler, so CI runs it
    (appending a comment to any .p4 file the target reads fails it)."""
    build = _build_module()
    stale, why = build.is_stale() if target == "v1model" else build.tna_is_stale(target)
    make = "make -C p4" + ("" if target == "v1model" else f" {target}")
    assert not stale, f"{why}: run `{make}` and commit p4/build"


def test_build_check_says_fresh():
    proc = subprocess.run([sys.executable, str(REPO / "p4" / "build.py"), "--check", "--target",
                           "all"], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.p4c
def test_v1model_compiles_to_the_committed_p4info(tmp_path):
    from control_plane.desired import parse_p4info_text

    build = _build_module()
    out = build.compile_p4(shutil.which("p4c"), tmp_path)
    assert out["returncode"] == 0, out["output"][-3000:]
    assert (parse_p4info_text((tmp_path / "netco.p4info.txtpb").read_text())
            == parse_p4info_text(build.P4INFO_OUT.read_text()))


def test_generated_files_are_fresh_p4_c_header_and_python():
    """gen.py's outputs (the P4 files, the C header of the extensions and the Python data-plane
    constants) equal the committed files: a change to layout.py/framing.py/gen.py or to
    define.p4/size.p4 that is not regenerated fails here, without a compiler."""
    spec = importlib.util.spec_from_file_location("netco_p4_gen_t", REPO / "p4" / "gen.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    outs = gen.outputs()
    names = {p.relative_to(REPO).as_posix() for p in outs}
    assert {"host/protocol/netco_layout.h", "host/protocol/generated_dataplane.py",
            "p4/shared/generated_protocol.p4"} <= names
    stale = [n for p, text in outs.items() if not p.exists() or p.read_text() != text
             for n in [p.relative_to(REPO).as_posix()]]
    assert not stale, f"generated files stale: {stale}; run `python p4/gen.py` and commit"


def test_the_same_release_built_elsewhere_keeps_the_stamp(tmp_path):
    """A p4c built from a git checkout says ``(SHA: 32893b7e8 …)``, one built from an export
    ``(SHA:  …)``: the same release writes the same outputs, so ``make -C p4`` on a machine
    with either keeps the committed stamp (it rewrote it, dirtying the checkout)."""
    build = _build_module()
    stamp = tmp_path / "stamp.json"
    first = {"seconds": 39.8, "peak_rss_mib": 625, "output": ""}
    assert build.write_stamp(stamp, "src", "out", "p4c 1.2.4.8 (SHA:  BUILD: Release)", first)
    before = stamp.read_bytes()
    assert not build.write_stamp(stamp, "src", "out", "p4c 1.2.4.8 (SHA: 32893b7e8 BUILD: Release)",
                                 first)
    assert stamp.read_bytes() == before
    assert build.write_stamp(stamp, "src", "out", "p4c 1.2.5.0 (SHA: 0 BUILD: Release)", first)
