"""The other shipped topologies come up as files: leaf-spine (4 hosts) and two leaf-spine
buildings over a WAN (8 hosts, three-level tree). Target ``auto``: BMv2 when present, else the
software target. Every tree switch must add exactly its direct contributors' packets."""

from __future__ import annotations

import os

import pytest
import torch

from control_plane.config import load_config
from control_plane.testbed.net import Testbed, with_free_ports
from control_plane.testbed.worker import tensor
from host.paths import REPO
from host.thc.simulate import allreduce as simulate
from tests.support.testbed import packets_per_allreduce

pytestmark = [pytest.mark.root, pytest.mark.mininet]


@pytest.mark.parametrize("topo", ["leaf_spine", "buildings"])
def test_topology_file_aggregates_along_its_tree(topo, tmp_path):
    cfg = with_free_ports(load_config(REPO / "mininet" / f"{topo}.yaml"))
    tag = f"{topo[0]}{os.getpid() % 1000}x"
    tb = Testbed(cfg, target="auto", tag=tag, workdir=tmp_path)
    try:
        report = tb.up()
        assert report["target"] in ("bmv2", "softswitch") and report["target_reason"]
        for ln in report["links"]:
            if "asked" in ln:  # buildings: the WAN link, measured before use
                assert 9.5 <= ln["measured"]["a->b"]["delay_ms_median"] <= 40
        job = tb.job()
        first, last = job.members[0], job.members[-1]
        assert tb.ping(first, last)
        n, size = len(job.members), 8192
        outs = tb.allreduce(lambda r, k: tensor(11, r, k, size), timeout=90)
        codec = tb.codec(job)
        ref = simulate(codec, [tensor(11, r, 0, size) for r in range(n)]).average
        assert all(torch.equal(o[0], ref) for o in outs)
        per_worker = packets_per_allreduce(codec, size)
        ctr = tb.counters()
        for node in job.tree:
            kids = sum(1 for c in job.tree if c.parent == node.switch)
            got = ctr[node.switch]["ingress.thc_slot.contributions"][0]
            assert got == (len(node.members) + kids) * per_worker, node.switch
        for sw in {s.name for s in cfg.switches} - {t.switch for t in job.tree}:
            assert ctr[sw]["ingress.thc_slot.contributions"][0] == 0  # not in the tree
    finally:
        tb.down()
    assert [i for i in os.listdir("/sys/class/net") if i.startswith(tag)] == []
