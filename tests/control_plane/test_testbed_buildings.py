"""Two buildings over an impaired WAN link: the job's tree aggregates at both leaves and at
their parent (the root), on the software target and on BMv2 when present.

The WAN link (50 Mbit/s, 5 ms, 1 % loss; no netem on this kernel) runs through an impairment
node that the testbed measures before anything uses it; a testbed whose impairment is not in
effect must fail at ``up`` and leave nothing behind.
"""

from __future__ import annotations

import os

import pytest

from control_plane.config import DEFAULT_BMV2_JSON, load_config
from control_plane.testbed.impair import ImpairmentError
from control_plane.testbed.net import Testbed, with_free_ports
from host.paths import REPO
from host.protocol.layout import DropReason
from tests.support.testbed import assert_exact_allreduce, leftovers, packets_per_allreduce

pytestmark = [pytest.mark.root, pytest.mark.mininet]
TOPO = REPO / "mininet" / "two_buildings.yaml"
TARGETS = ["softswitch", pytest.param("bmv2", marks=pytest.mark.bmv2)]


@pytest.mark.parametrize("target", TARGETS)
def test_tree_over_impaired_wan(target, tmp_path):
    if target == "bmv2" and not DEFAULT_BMV2_JSON.exists():
        pytest.skip(f"{DEFAULT_BMV2_JSON} not built (netco p4 build needs p4c)")
    cfg = with_free_ports(load_config(TOPO))
    tag = f"b{os.getpid() % 1000}{target[0]}"
    tb = Testbed(cfg, target=target, tag=tag, workdir=tmp_path, seed=1)
    try:
        report = tb.up()
        (wan,) = [ln for ln in report["links"] if "asked" in ln]
        assert wan["link"] == "b-leaf:3-wan:2" and wan["mode"] in ("forwarder", "netem")
        for d in ("a->b", "b->a"):
            m = wan["measured"][d]
            assert 0.2 <= m["loss_pct"] <= 2.5, m
            assert 4.5 <= m["delay_ms_median"] <= 35, m
            assert 30 <= m["rate_mbps"] <= 65, m
        assert tb.ping("h1", "h4")  # routed across the WAN
        size, rounds = 8192, 2
        codec = assert_exact_allreduce(tb, size, seed=3, rounds=rounds, timeout=90)
        per_worker = rounds * packets_per_allreduce(codec, size)
        ctr = tb.counters()
        # each leaf adds its two workers; the parent adds the two leaves' partial sums
        for sw in ("a-leaf", "b-leaf", "wan"):
            assert ctr[sw]["ingress.thc_slot.contributions"][0] == 2 * per_worker, sw
            bad = {DropReason(i).name: n for i, n in ctr[sw]["ingress.drops"].items()
                   if n and i not in (DropReason.DUPLICATE, DropReason.STALE)}
            assert bad == {}, sw
        assert ctr["wan"]["ingress.thc_output.results"][0] == per_worker  # the root releases once
        st = tb.status()
        assert all(v["alive"] for v in st["switches"].values())
        if wan["mode"] == "forwarder":
            fw = st["links"][0]["forwarder"]
            assert fw["a->b"]["dropped"] > 0 and fw["b->a"]["dropped"] > 0  # loss hit real traffic
    finally:
        removed = tb.down()
    assert removed["left"] == []
    assert leftovers(tag, [*(s.address for s in cfg.switches), str(tmp_path)]) == []


def test_impairment_not_in_effect_fails_loudly(tmp_path):
    # A bridge cannot delay: with that mode forced, the link passes frames without the 5 ms
    # asked for, and up() must refuse the testbed and remove everything it built.
    cfg = with_free_ports(load_config(TOPO))
    tag = f"f{os.getpid() % 1000}"
    tb = Testbed(cfg, target="softswitch", tag=tag, workdir=tmp_path, force_mode="bridge")
    with pytest.raises(ImpairmentError, match=r"b-leaf:3-wan:2.*delay asked 5 ms, measured median"):
        tb.up()
    assert tb.net is None
    assert leftovers(tag, [*(s.address for s in cfg.switches), str(tmp_path)]) == []
