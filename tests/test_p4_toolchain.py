"""``tools/p4-toolchain.sh`` (``./dev.sh p4``): its flags, its ``--src`` checks, its plan, and
that the versions it pins are the ones the README names. Nothing here builds anything: the
build itself (about an hour) is run by hand, as the README says."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from host.paths import REPO

SCRIPT = REPO / "tools" / "p4-toolchain.sh"
README = REPO / "README.md"
STEPS = ["apt", "sources", "pi", "bmv2", "p4c", "link", "smoke"]


def pins() -> dict[str, str]:
    """The ``NAME=value`` pins at the top of the script."""
    found = dict(re.findall(r"^([A-Z0-9_]+_(?:COMMIT|TAG))=(\S+)", SCRIPT.read_text(), re.M))
    assert set(found) == {"PI_COMMIT", "BMV2_TAG", "BMV2_COMMIT", "P4C_TAG", "P4C_COMMIT",
                          "P4RUNTIME_COMMIT"}, found
    return found


def toolchain(*args: str, env: dict[str, str] | None = None,
              cmd: list[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run((cmd or ["bash", str(SCRIPT)]) + list(args), cwd=REPO,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=60)


def src_tree(root: Path, bmv2_version: str | None = None) -> Path:
    """A ``--src`` layout with every file the script checks for (empty files)."""
    p = pins()
    for rel in ["PI/autogen.sh", "PI/proto/p4runtime/proto/p4/v1/p4runtime.proto",
                "PI/proto/openconfig/gnmi/proto/gnmi/gnmi.proto",
                "PI/proto/openconfig/public/release/.keep", "PI/third_party/uthash/src/uthash.h",
                "PI/third_party/googletest/googletest/.keep", "behavioral-model/autogen.sh",
                "p4c/CMakeLists.txt", "p4runtime/proto/p4/v1/p4runtime.proto"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).touch()
    (root / "behavioral-model/VERSION").write_text((bmv2_version or p["BMV2_TAG"]) + "\n")
    (root / "p4c/Version.txt").write_text(p["P4C_TAG"].removeprefix("v") + "\n")
    return root


def test_help_lists_every_option() -> None:
    r = toolchain("--help")
    assert r.returncode == 0, r.stderr
    for opt in ["--prefix", "--src", "--jobs", "--no-apt", "--force", "--only", "--dry-run",
                "DIR/PI", "DIR/behavioral-model", "DIR/p4c", "DIR/p4runtime"]:
        assert opt in r.stdout, opt


def test_dev_sh_p4_runs_the_script_without_a_venv(tmp_path: Path) -> None:
    venv = tmp_path / "no-venv"
    r = toolchain("p4", "--help", env={"NETCO_VENV": str(venv)}, cmd=[str(REPO / "dev.sh")])
    assert r.returncode == 0, r.stderr
    assert "--src DIR" in r.stdout
    assert not venv.exists(), "./dev.sh p4 created the venv it does not need"


@pytest.mark.parametrize("args, named", [
    (["--bogus"], "'--bogus'"),
    (["--jobs", "two"], "--jobs"),
    (["--only", "everything"], "--only"),
    (["--prefix"], "--prefix"),
    (["--prefix", "--force"], "--prefix"),
])
def test_bad_flags_are_one_line_and_exit_2(args: list[str], named: str) -> None:
    r = toolchain("--dry-run", *args)  # --dry-run first: a mis-parsed flag must not build
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert named in r.stderr


def test_src_lacking_a_component_names_it(tmp_path: Path) -> None:
    src = src_tree(tmp_path / "src")
    shutil.rmtree(src / "PI" / "third_party" / "uthash")
    r = toolchain("--src", str(src), "--dry-run", "--prefix", str(tmp_path / "prefix"))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"p4-toolchain: --src {src} lacks PI/third_party/uthash/src/uthash.h (layout: see --help)"]
    assert not (tmp_path / "prefix").exists()


def test_src_at_another_version_is_refused(tmp_path: Path) -> None:
    src = src_tree(tmp_path / "src", bmv2_version="1.15.0")
    r = toolchain("--src", str(src), "--dry-run")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1
    assert "is BMv2 1.15.0, pinned is " + pins()["BMV2_TAG"] in r.stderr


def test_dry_run_lists_the_steps_with_the_pins_and_changes_nothing(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    src = src_tree(tmp_path / "src")
    r = toolchain("--dry-run", "--src", str(src), "--prefix", str(prefix))
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if re.match(r"p4-toolchain: \[\d/7\]", ln)]
    assert [re.search(r"\] (\w+):", ln).group(1) for ln in lines] == STEPS
    assert all(ln.endswith("would run") and "min on 2 cores" in ln for ln in lines)
    for value in pins().values():
        assert value in r.stdout, value
    assert not prefix.exists()


def test_a_stamp_of_other_versions_is_not_trusted(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    (prefix / ".stamps").mkdir(parents=True)
    (prefix / ".stamps" / "pi").write_text("PI 0000000000000000000000000000000000000000\n")
    r = toolchain("--dry-run", "--only", "pi", "--prefix", str(prefix))
    assert r.returncode == 0, r.stderr
    [line] = [ln for ln in r.stdout.splitlines() if "[3/7]" in ln]
    assert line.endswith("would run")


def test_readme_names_the_pinned_versions() -> None:
    p = pins()
    text = README.read_text()
    section = text[text.index("## P4 toolchain"):]
    section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else None]
    assert f"BMv2 {p['BMV2_TAG']}" in section
    assert f"p4c {p['P4C_TAG'].removeprefix('v')}" in section
    assert p["PI_COMMIT"][:7] in section
    assert "./dev.sh p4" in section and "--src" in section


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck not on PATH (apt-get install shellcheck)")
def test_shellcheck_is_clean() -> None:
    r = subprocess.run(["shellcheck", str(SCRIPT), str(REPO / "dev.sh")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout


def test_the_skip_reason_of_bmv2_and_p4c_names_this_command(tmp_path: Path) -> None:
    from host import tools

    reason = tools.missing("simple_switch_grpc", "p4c", path=str(tmp_path))
    assert reason.count("./dev.sh p4 builds it") == 2, reason
