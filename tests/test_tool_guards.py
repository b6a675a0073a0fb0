"""Every test that shells out to a tool skips, naming its Debian package, where it is missing.

The static check (tests/support/toolguard.py) runs over the whole of tests/; it is shown to
fail on the test that started this (test_impair_node's bridge test ran ``nft`` unguarded:
``nft: No such file or directory`` on a machine without nftables). Then the guards
themselves: with a ``PATH`` that hides the binary, the marker skips naming the package and
the testbed helpers raise naming it (no ``False``, no ENOENT).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from host.paths import REPO
from host.tools import MissingToolError
from tests.support.hidepath import path_without
from tests.support.toolguard import check_source, check_tree

#: The shape of tests/control_plane/test_impair_node.py before the guards (issue 36).
OLD_IMPAIR_NODE = '''
import subprocess
import pytest

pytestmark = pytest.mark.root


def _sh(cmd, stdin=None):
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True).stdout


class Chain:
    def __init__(self):
        _sh(["ip", "netns", "add", "x"])

    def run_node(self, cmd, stdin=None):
        return _sh(["ip", "netns", "exec", "x", *cmd], stdin)


def test_bridge_mode_loss_and_rate(chain):
    configure(imp, "a1", "b1", "bridge", chain.run_node)
    assert "numgen" in chain.run_node(["nft", "list", "ruleset"])
'''


def test_the_check_fails_on_an_unguarded_tool():
    bad = check_source(OLD_IMPAIR_NODE, "old.py")
    assert {(u.binary, u.where) for u in bad} == {
        ("ip", "a helper of the module (its pytestmark)"),
        ("nft", "test test_bridge_mode_loss_and_rate")}
    assert "add @pytest.mark.tools('nft')" in str(next(u for u in bad if u.binary == "nft"))
    fixed = OLD_IMPAIR_NODE.replace(
        "pytestmark = pytest.mark.root",
        'pytestmark = [pytest.mark.root, pytest.mark.tools("ip")]').replace(
        "def test_bridge", '@pytest.mark.tools("nft")\ndef test_bridge')
    assert check_source(fixed) == []


@pytest.mark.parametrize("guard", [
    'pytest.mark.skipif(shutil.which("nft") is None, reason="x")',
    "pytest.mark.mininet",
])
def test_other_guards_count(guard):
    src = f'import pytest, shutil\n\n@{guard}\ndef test_x(run):\n    run(["nft", "list"])\n'
    assert check_source(src) == []
    src_str = f'import pytest\n\n@{guard}\ndef test_x(node):\n    node.cmd("nft list ruleset")\n'
    assert check_source(src_str) == []
    assert [u.binary for u in check_source(src_str.replace(f"@{guard}\n", ""))] == ["nft"]


def test_a_check_in_the_body_counts_and_parametrize_lists_do_not():
    src = ('import shutil, pytest\n\n@pytest.mark.parametrize("mode", ["ping", "nft"])\n'
           'def test_x(run, mode):\n    if shutil.which("ping") is None:\n        pytest.skip("x")\n'
           '    run(["ping", "-c1", "h"])\n')
    assert check_source(src) == []


def test_every_test_that_shells_out_is_guarded():
    bad = check_tree(REPO / "tests")
    assert not bad, "\n".join(map(str, bad))


def test_without_nftables_the_bridge_test_skips_naming_the_package(tmp_path):
    """The issue's failure, on a machine that has nft: hide it and run the test that raised
    ``nft: No such file or directory``; it must skip with 'apt-get install nftables'."""
    if os.geteuid() != 0:
        pytest.skip("the test needs root first (its root marker skips before the tools)")
    env = {**os.environ, "PATH": path_without(tmp_path / "bin", "nft")}
    test = "tests/control_plane/test_impair_node.py::test_bridge_mode_loss_and_rate"
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          test], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:]
    assert "1 skipped" in res.stdout and "nft not on PATH (apt-get install nftables)" in res.stdout


def test_the_mininet_testbed_names_the_package_of_a_missing_tool(tmp_path, monkeypatch):
    """``Testbed.ping`` ran ``ping`` inside a host and answered False when it was missing; the
    runners now raise naming iputils-ping before running anything."""
    from control_plane.testbed import net

    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "ping", "nft"))
    with pytest.raises(MissingToolError, match=r"ping not on PATH.*apt-get install iputils-ping"):
        net._in(os.getpid())(["ping", "-n", "-c", "1", "10.0.0.2"])
    with pytest.raises(MissingToolError, match=r"apt-get install nftables"):
        net._run(["nft", "-f", "-"], net.HOST_NFT)


def test_the_impairment_node_names_nftables_before_running_anything(tmp_path, monkeypatch):
    from control_plane.testbed.impair import Impairment
    from control_plane.testbed.impair.node import configure

    ran = []
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "nft"))
    with pytest.raises(MissingToolError, match=r"needed by the impairment node's bridge mode "
                                               r"\(apt-get install nftables\)"):
        configure(Impairment(loss_pct=2), "a1", "b1", "bridge", lambda *a: ran.append(a) or "")
    assert ran == []
