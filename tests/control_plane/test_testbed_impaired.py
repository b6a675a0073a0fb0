"""THC all-reduce across a WAN link with heavier impairments than the file's: 5 % loss with
10 ms delay, and duplication + reordering + jitter. The impairment node's own counters prove
the traffic was hit; the exact policy must still deliver the simulated result bit for bit."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from control_plane.config import load_config
from control_plane.testbed.impair import Impairment
from control_plane.testbed.net import Testbed, with_free_ports
from host.paths import REPO
from tests.support.testbed import assert_exact_allreduce

pytestmark = [pytest.mark.root, pytest.mark.mininet]
WAN = "b-leaf:3-wan:2"

CASES = {
    "loss5-delay10": Impairment(delay_ms=10, loss_pct=5, bandwidth_mbps=50, seed=21),
    "dup-reorder-jitter": Impairment(delay_ms=3, jitter_ms=1, dup_pct=5, reorder_pct=10,
                                     reorder_gap_ms=3, seed=22),
}


@pytest.mark.parametrize("name", list(CASES))
def test_allreduce_survives_impaired_wan(name, tmp_path):
    imp = CASES[name]
    cfg = with_free_ports(load_config(REPO / "mininet" / "two_buildings.yaml"))
    tag = f"i{os.getpid() % 1000}{list(CASES).index(name)}"
    tb = Testbed(cfg, target="softswitch", tag=tag, workdir=tmp_path, impairments={WAN: imp})
    try:
        report = tb.up()
        (link,) = [ln for ln in report["links"] if "asked" in ln]
        assert link["impairment"] == imp.to_dict() and link["mode"] in ("forwarder", "netem")
        assert_exact_allreduce(tb, 16384, seed=5, rounds=2, timeout=120)
        if link["mode"] == "forwarder":
            # counters written every second and on exit: read them after stopping the node
            tb.forwarders[WAN].terminate()
            tb.forwarders[WAN].wait(10)
            stats = json.loads(Path(link["forwarder_stats"]).read_text())
            for d in ("a->b", "b->a"):
                hit = stats[d]["dropped"] if imp.loss_pct else stats[d]["duplicated"] + stats[d]["reordered"]
                assert hit > 0, (d, stats[d])
    finally:
        tb.down()
    assert [n for n in os.listdir("/sys/class/net") if n.startswith(tag)] == []
