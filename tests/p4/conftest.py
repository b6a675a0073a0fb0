"""Fixtures of the packet tests: one aggregation target per parameter.

``TARGETS`` lists the targets (:mod:`tests.support.aggnet`); each test of ``tests/p4`` that
uses ``single_switch`` or ``tree`` runs once per target:

``bmv2``
    BMv2 on veth pairs; needs root, ``simple_switch_grpc`` and the compiled program (markers;
    tests/conftest.py skips with the reason).
``softswitch``
    the software target over UDP tunnels on 127.0.0.1; runs everywhere (its loop in C where
    built).
``softswitch-pyloop``
    the same with the switch's Python loop (``--no-c-loop``), the reference of the C loop.
``softswitch-afpacket``
    the software target on veth pairs read with AF_PACKET, wired like BMv2; needs root.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.aggnet import INTRUDER, WORKERS, AggregationNetwork, Bmv2Network, SoftswitchNetwork


def _bmv2(workdir: Path, tag: str) -> AggregationNetwork:
    return Bmv2Network(workdir, prefix=f"nct{os.getpid() % 10000}{tag}")


def _softswitch(workdir: Path, tag: str) -> AggregationNetwork:
    return SoftswitchNetwork(workdir, wiring="tunnel")


def _softswitch_pyloop(workdir: Path, tag: str) -> AggregationNetwork:
    return SoftswitchNetwork(workdir, wiring="tunnel", switch_args=("--no-c-loop",))


def _softswitch_afpacket(workdir: Path, tag: str) -> AggregationNetwork:
    return SoftswitchNetwork(workdir, wiring="afpacket", prefix=f"ncs{os.getpid() % 10000}{tag}")


TARGETS = [
    pytest.param(_bmv2, id="bmv2", marks=[pytest.mark.root, pytest.mark.bmv2, pytest.mark.p4c]),
    pytest.param(_softswitch, id="softswitch"),
    pytest.param(_softswitch_pyloop, id="softswitch-pyloop"),
    pytest.param(_softswitch_afpacket, id="softswitch-afpacket", marks=[pytest.mark.root]),
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
