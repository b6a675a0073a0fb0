"""The P4 program's packet suite against the software target on veth pairs (AF_PACKET, root).

Same wiring as the BMv2 target: hosts in network namespaces, switch ports read raw.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from softswitch_suite import listed_in_p4_conftest, load_suite, single_switch_net, tree_net

if listed_in_p4_conftest("afpacket"):
    pytest.skip("tests/p4/conftest.py runs the suite against this wiring itself",
                allow_module_level=True)

pytestmark = pytest.mark.root

globals().update(load_suite("afpacket"))


@pytest.fixture(scope="module")
def single_switch(tmp_path_factory):
    yield from single_switch_net(tmp_path_factory.mktemp("softraw-single"), "afpacket", "c")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    yield from tree_net(tmp_path_factory.mktemp("softraw-tree"), "afpacket", "d")
