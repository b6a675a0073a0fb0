"""Load the packet suite of ``tests/p4`` against the software target (helper, not a test file).

``tests/p4`` holds one suite for every aggregation target (``switch_fixture.AggregationNetwork``).
Until ``tests/p4/conftest.py`` lists the software target itself, the test files next to this
module import the suite's test functions under their own module names (fresh job-id counters)
and provide the ``single_switch`` and ``tree`` fixtures with
:class:`host.softswitch.testnet.SoftswitchNetwork`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[3]
P4_TESTS = REPO / "tests" / "p4"
if str(P4_TESTS) not in sys.path:
    sys.path.insert(0, str(P4_TESTS))   # switch_fixture, thc_frames (as tests/p4/conftest.py does)

from switch_fixture import INTRUDER, WORKERS, job_entries  # noqa: E402

from host.softswitch.testnet import SoftswitchNetwork  # noqa: E402

SUITE_FILES = ("test_p4_aggregation", "test_p4_tree")


def listed_in_p4_conftest(wiring: str) -> bool:
    """Whether ``tests/p4/conftest.py`` already lists the software target with ``wiring``
    (then the copies here would only run the same cases twice)."""
    text = (P4_TESTS / "conftest.py").read_text()
    if "SoftswitchNetwork" not in text:
        return False
    if wiring == "tunnel":   # the default wiring
        return 'wiring="tunnel"' in text or "wiring=" not in text
    return f'wiring="{wiring}"' in text


def load_suite(tag: str) -> dict[str, object]:
    """Test functions and fixtures of the suite, loaded under fresh module names."""
    out: dict[str, object] = {}
    for name in SUITE_FILES:
        spec = importlib.util.spec_from_file_location(f"softswitch_{tag}_{name}", P4_TESTS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod: ModuleType = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out.update({k: v for k, v in vars(mod).items() if k.startswith("test_") or k == "tree_job"})
    return out


def single_switch_net(workdir: Path, wiring: str, tag: str) -> Iterator[SoftswitchNetwork]:
    """One switch ``s0`` with hosts w0..w7 and x (the suite's ``single_switch``)."""
    net = SoftswitchNetwork(workdir, job_entries, wiring=wiring, prefix=f"ncs{os.getpid() % 10000}{tag}")
    net.add_switch("s0")
    for name in [*WORKERS, INTRUDER]:
        net.add_host(name, "s0")
    net.start()
    try:
        yield net
    finally:
        net.stop()


def tree_net(workdir: Path, wiring: str, tag: str) -> Iterator[SoftswitchNetwork]:
    """root over leaf0 (a0, a1) and leaf1 (b0, b1) (the suite's ``tree``)."""
    net = SoftswitchNetwork(workdir, job_entries, wiring=wiring, prefix=f"ncs{os.getpid() % 10000}{tag}")
    for s in ("root", "leaf0", "leaf1"):
        net.add_switch(s)
    for name, leaf in (("a0", "leaf0"), ("a1", "leaf0"), ("b0", "leaf1"), ("b1", "leaf1")):
        net.add_host(name, leaf)
    net.links = {"leaf0": net.link("leaf0", "root"), "leaf1": net.link("leaf1", "root")}
    net.start()
    try:
        yield net
    finally:
        net.stop()
