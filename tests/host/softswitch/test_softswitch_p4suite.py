"""The P4 program's packet suite (tests/p4) against the software target over UDP tunnels.

No root needed: runs on every CI machine. The same test functions run against BMv2 in
tests/p4 where BMv2 is present (one suite, two targets).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from softswitch_suite import listed_in_p4_conftest, load_suite, single_switch_net, tree_net

if listed_in_p4_conftest("tunnel"):
    pytest.skip("tests/p4/conftest.py runs the suite against this wiring itself",
                allow_module_level=True)

globals().update(load_suite("tunnel"))


@pytest.fixture(scope="module")
def single_switch(tmp_path_factory):
    yield from single_switch_net(tmp_path_factory.mktemp("soft-single"), "tunnel", "a")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    yield from tree_net(tmp_path_factory.mktemp("soft-tree"), "tunnel", "b")
