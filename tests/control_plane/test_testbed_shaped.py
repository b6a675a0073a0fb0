"""Shaped Mininet testbeds: the rack and two buildings with every host link at 100 Mbit/s.

Worker processes run inside the Mininet hosts (the launcher the benchmarks use): THC through
the switch program in raw frames, gloo's ring all-reduce routed by the switch program over the
same shaped links. Checked: the shaping is verified before use and a missing shaper fails that
check; THC's results equal the THC simulation bit for bit; the shapers carried every THC byte;
the reports say what ran where. No timings.
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from control_plane.config import DEFAULT_BMV2_JSON
from control_plane.testbed.mnrack import MininetRack
from control_plane.testbed.rackrun import allreduce_bench
from control_plane.testbed.shaping import (
    TCP_EFFICIENCY,
    ShapingError,
    check_rates,
    measure_flows,
    rate_problems,
)
from control_plane.testbed.worker import tensor
from host.thc.codec import THCCodec
from host.thc.simulate import allreduce as simulate
from tests.support.testbed import leftovers

pytestmark = [pytest.mark.root, pytest.mark.mininet]
HOSTS = {"mininet": ["h1", "h2", "h3", "h4"], "buildings": ["h1", "h2", "h3", "h4"]}
KIND = {"mininet": "Mininet rack", "buildings": "Mininet two buildings"}


def _check_exact(rep: dict, size: int, seed: int, mbps: float) -> None:
    ref = simulate(THCCodec(), [tensor(seed, r, 0, size) for r in range(4)], round=0).average
    for r, res in enumerate(rep["results"]):
        np.testing.assert_array_equal(res, ref.numpy(), err_msg=f"rank {r}")
    assert rep["min_count"] == 4
    check_rates(rep["rack"]["measured_mbps"], mbps)
    # THC's bytes crossed the shaped links: every host's shapers carried its frames
    for h, dirs in rep["tbf"].items():
        assert dirs["up"]["bytes"] >= rep["thc_bytes_sent"], h
        assert dirs["down"]["bytes"] >= rep["thc_bytes_received"], h


@pytest.mark.parametrize("testbed", ["mininet", "buildings"])
def test_exact_sums_and_gloo_over_shaped_links(testbed):
    """4 worker processes in the hosts: THC exact, gloo done, the shaping verified first."""
    size, seed, mbps = 20_000, 5, 100.0
    tag = f"s{os.getpid() % 1000}{testbed[0]}"
    rep = allreduce_bench(4, mbps, size, repeats=1, seed=seed, check=True, quiet=True,
                          testbed=testbed, tag=tag)
    rack = rep["rack"]
    assert rack["kind"] == KIND[testbed] and rack["link_mbps"] == mbps
    assert rack["target"] == "softswitch"
    assert rack["shaper"] == "tc tbf on both egresses of every host link"
    assert set(rack["measured_mbps"]) == set(HOSTS[testbed])
    assert all(set(d) == {"up", "down"} for d in rack["measured_mbps"].values())
    assert rep["gloo_s"] > 0 and rep["thc_s"] > 0
    _check_exact(rep, size, seed, mbps)
    if testbed == "buildings":  # the WAN link shaped too, and measured before use
        (wan,) = rack["wan"]
        assert wan["link"] == "b-leaf:3-wan:2" and wan["asked"] == f"{mbps:g}Mbit/s"
        for d in ("a->b", "b->a"):
            assert wan["measured"][d]["rate_mbps"] <= 1.3 * mbps
        # Every result reached its workers the first time: a worker retransmits a packet only
        # when its result is late (not for every packet), and the root re-sends fewer results
        # than it releases. A WAN node that lost the root's results to building B (a learning
        # bridge, fooled by the switch-to-switch frames' addresses) made every B worker
        # retransmit every packet and the root answer each: resent ~ 2 x released.
        for r, w in enumerate(rep["thc_window"]):
            assert w["retransmits"] < w["packets"] - w["retransmits"], (r, w)
        root = rep["switch"]["wan"]
        released = root["ingress.thc_output.results"]["0"]
        assert released > 0 and root["ingress.thc_output.resent"]["0"] < released, root
    assert leftovers(tag, []) == []


@pytest.mark.bmv2
def test_exact_sums_on_bmv2_over_shaped_links():
    """BMv2 as the switch program (correctness at a small size) on the shaped rack: the links
    are verified through the kernel routers, so BMv2's own forwarding rate does not matter."""
    if not DEFAULT_BMV2_JSON.exists():
        pytest.skip(f"{DEFAULT_BMV2_JSON} not built (netco p4 build needs p4c)")
    size, seed, mbps = 3000, 9, 100.0
    tag = f"s{os.getpid() % 1000}b"
    rep = allreduce_bench(4, mbps, size, repeats=1, seed=seed, check=True, quiet=True,
                          which=("thc",), testbed="mininet", target="bmv2", tag=tag)
    assert rep["rack"]["target"] == "bmv2"
    _check_exact(rep, size, seed, mbps)
    assert leftovers(tag, []) == []


def test_a_missing_or_wrong_shaper_fails_the_check():
    """The verification the testbed runs before use fails when one shaper is gone or wrong."""
    tag = f"s{os.getpid() % 1000}v"
    rack = MininetRack("mininet", 100.0, tag=tag)
    try:
        rep = rack.up()
        check_rates(rep["measured_mbps"], 100.0)
        ups = {h: m["up"] for h, m in rep["measured_mbps"].items()}
        assert all(v <= 1.15 * 100 * TCP_EFFICIENCY for v in ups.values()), ups
        port = rack.tb.plan.host("h2").switch_if
        subprocess.run(["tc", "qdisc", "replace", "dev", port, "root", "tbf", "rate", "1gbit",
                        "burst", "131072", "latency", "50ms"], check=True)
        with pytest.raises(ShapingError, match=r"h2 down \(.*\): tbf at 1000 Mbit/s"):
            rack.tb.verify_shaping()
        subprocess.run(["tc", "qdisc", "del", "dev", port, "root"], check=True)
        with pytest.raises(ShapingError, match=r"h2 down \(.*\): no tbf"):
            rack.tb.verify_shaping()
        # and the measurement alone sees the unshaped downlink run past the rate
        measured = measure_flows(rack.tb.shaping_flows(), 100.0)
        assert ("h2", "down") in rate_problems(measured, 100.0), measured
    finally:
        rack.down()
    assert leftovers(tag, []) == []

