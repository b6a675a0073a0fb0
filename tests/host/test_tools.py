"""host/tools.py: one table of external binaries; a missing one names its Debian package.

"Missing" is shown with a ``PATH`` that hides the binary (tests/support/hidepath.py), so these
run the same whether or not the machine has it.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from host import tools
from host.paths import REPO
from tests.support.hidepath import path_without


def test_require_names_the_debian_package_of_a_hidden_binary(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "nft"))
    with pytest.raises(tools.MissingToolError) as ei:
        tools.require("unshare", "nft", why="by the bridge mode")
    assert str(ei.value) == "nft not on PATH, needed by the bridge mode (apt-get install nftables)"
    assert ei.value.binary == "nft"
    tools.require("unshare")   # what is there passes
    assert tools.missing("unshare") is None
    assert tools.missing("nft", "unshare") == "nft not on PATH (apt-get install nftables)"


def test_a_command_is_checked_by_its_first_word(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "ping"))
    with pytest.raises(tools.MissingToolError, match=r"apt-get install iputils-ping"):
        tools.require_command(["ping", "-c", "1", "10.0.0.1"])
    tools.require_command([sys.executable, "-c", "pass"])   # not a table binary: unchecked
    tools.require_command([])


def test_what_debian_does_not_package_says_where_to_get_it(tmp_path):
    reason = tools.missing("simple_switch_grpc", "p4c", "ping", path=str(tmp_path))
    assert reason.startswith("simple_switch_grpc, p4c, ping not on PATH (apt-get install iputils-ping; ")
    assert "simple_switch_grpc: not packaged by Debian" in reason and "p4lang-p4c" in reason


def test_a_binary_outside_the_table_is_refused():
    with pytest.raises(KeyError, match=r"not in host\.tools\.TOOLS"):
        tools.require("frobnicate")


def test_the_missing_packages_line_for_apt_get(tmp_path):
    hidden = path_without(tmp_path / "bin", "nft", "ethtool")
    out = subprocess.run([sys.executable, "-m", "host.tools", "--missing", "nft", "ethtool", "ip"],
                         env={"PATH": hidden}, cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["nftables", "ethtool"]
    every = subprocess.run([sys.executable, "-m", "host.tools"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    assert every == tools.packages(tools.TEST_TOOLS) and "mininet" in every
    bad = subprocess.run([sys.executable, "-m", "host.tools", "frobnicate"], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_ci_installs_every_package_the_tests_use():
    """.ci/run's apt-get line holds every Debian package of host.tools.TEST_TOOLS (a tool the
    suite runs but CI does not install would only ever be skipped there)."""
    text = (REPO / ".ci" / "run").read_text()
    line = next(ln for ln in text.splitlines() if "apt-get install" in ln and "-y" in ln)
    installed = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", line.split("--no-install-recommends", 1)[1]))
    assert set(tools.packages(tools.TEST_TOOLS)) <= installed, line


def test_a_private_interpreter_is_named_with_the_folder_that_hides_it():
    """What ./dev.sh warns of (a venv whose Python is under a mode-0700 folder is private to
    its owner) and what the isolation check names (the interpreter inside a user namespace)."""
    import os
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="netco-tools-test-") as tmp:   # /tmp: not private
        base = Path(tmp)
        base.chmod(0o755)
        private, public = base / "home", base / "opt"
        private.mkdir(mode=0o700)
        public.mkdir(mode=0o755)
        for d in (private, public):
            (d / "python3").write_text("#!/bin/sh\n")
            (d / "python3").chmod(0o755)
        link = public / "python"
        link.symlink_to(private / "python3")   # a venv's bin/python -> the base interpreter
        assert tools.exec_blocked(str(link), uid=-1) == (
            f"its directory {private} is mode 0700 (owner {_owner(private)})")
        assert tools.exec_blocked(str(public / "python3"), uid=-1) is None
        (public / "python3").chmod(0o750)
        assert tools.exec_blocked(str(public / "python3"), uid=-1) == (
            f"{public / 'python3'} is mode 0750 (owner {_owner(public)})")
        assert tools.exec_blocked(str(link), uid=os.stat(private).st_uid, gids=set()) is None
        out = subprocess.run([sys.executable, "-m", "host.tools", "--others-cannot-run", str(link)],
                             cwd=REPO, capture_output=True, text=True, check=True).stdout
        assert out == f"its directory {private} is mode 0700 (owner {_owner(private)})\n"


def _owner(path) -> str:
    import pwd

    return pwd.getpwuid(path.stat().st_uid).pw_name
