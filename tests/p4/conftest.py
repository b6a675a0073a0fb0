"""Fixtures of the packet tests: one aggregation target per parameter.

``TARGETS`` lists the targets; each test runs once per target. BMv2 needs root (namespaces,
veth), ``simple_switch_grpc`` and ``p4c`` (markers; tests/conftest.py skips with the reason).
The software aggregation target joins by adding a ``pytest.param`` here whose factory returns
an :class:`switch_fixture.AggregationNetwork`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The suite runs with --import-mode=importlib: make the helper modules next to this file
# (switch_fixture, thc_frames) importable by their plain names.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from switch_fixture import INTRUDER, WORKERS, AggregationNetwork, Bmv2Network, job_entries


def _bmv2(workdir: Path, tag: str) -> AggregationNetwork:
    return Bmv2Network(workdir, prefix=f"nct{os.getpid() % 10000}{tag}")


def _softswitch(workdir: Path, tag: str) -> AggregationNetwork:
    from host.softswitch.testnet import SoftswitchNetwork

    return SoftswitchNetwork(workdir, entries=job_entries, wiring="tunnel")


TARGETS = [
    pytest.param(_bmv2, id="bmv2", marks=[pytest.mark.root, pytest.mark.bmv2, pytest.mark.p4c]),
    pytest.param(_softswitch, id="softswitch"),
]


@pytest.fixture(scope="module", params=TARGETS)
def target(request: pytest.FixtureRequest) -> Callable[[Path, str], AggregationNetwork]:
    """Factory of the aggregation target under test."""
    return request.param


@pytest.fixture(scope="module")
def single_switch(target, tmp_path_factory) -> Iterator[AggregationNetwork]:
    """One switch ``s0`` with hosts w0..w7 and x, started, no jobs."""
    net = target(tmp_path_factory.mktemp("single"), "a")
    net.add_switch("s0")
    for name in [*WORKERS, INTRUDER]:
        net.add_host(name, "s0")
    net.start()
    try:
        yield net
    finally:
        net.stop()


@pytest.fixture(scope="module")
def tree(target, tmp_path_factory) -> Iterator[AggregationNetwork]:
    """Two leaf switches (hosts a0, a1 on ``leaf0``; b0, b1 on ``leaf1``) under ``root``."""
    net = target(tmp_path_factory.mktemp("tree"), "b")
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
