"""A ScaleAcross plan installed on a two-building Mininet testbed: DP groups aggregate along
the planned trees, cross-building flows take the planned uplinks.

Topology ``tests/control_plane/scaleacross/data/two_uplinks.yaml``: leaves ``a-leaf`` and
``b-leaf`` (two hosts each), each linked to both cross-building switches ``x0`` and ``x1``;
shortest paths go over ``x0``. Plan: the tiny scenario next to it (2 buildings × 2 nodes × 2
GPUs, TP 2 inside a node, DP 4 across buildings, two uplinks per building), written by
``control_plane.scaleacross`` and merged with ``control_plane.scaleacross.install``.

1. THC plan: two DP groups, dealt to the two uplinks, so group ``tp1`` aggregates at ``x1``
   (not on the shortest path) and ``tp0`` at ``x0``. Each group's all-reduce, run alone,
   equals the THC simulation bit for bit; the switch counters show aggregation at both leaves
   and at the planned parent only; the interface counters show its packets on the planned
   uplinks and none on the other ones.
2. The same testbed reconciled to the hierarchical plan with ``netco controller apply TOPO
   --plan PLAN`` (``paths`` for the building-to-building ring): pings that went over ``x0``
   before now take the uplinks the plan deals their destination to (``b2``, ``a2`` over
   ``x1``; ``b1``, ``a1`` over ``x0``).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
import yaml

from control_plane.cli.main import main as netco_main
from control_plane.config import DEFAULT_BMV2_JSON
from control_plane.scaleacross.install import install_files, install_plan, read_topology
from control_plane.scaleacross.netplan import build_network_plan
from control_plane.scaleacross.plan import resolve_plan
from control_plane.scaleacross.scenario import load_scenario
from control_plane.testbed.net import Testbed, with_free_ports
from control_plane.testbed.worker import tensor
from host.protocol.layout import DropReason
from host.thc.simulate import allreduce as simulate
from tests.support.testbed import leftovers, packets_per_allreduce

pytestmark = [pytest.mark.root, pytest.mark.mininet]
DATA = Path(__file__).resolve().parent / "scaleacross" / "data"
UPLINKS = {"A-x0": "a-leaf:3-x0:1", "A-x1": "a-leaf:4-x1:1",
           "B-x0": "b-leaf:3-x0:2", "B-x1": "b-leaf:4-x1:2"}
NOISE = 3  # packets an idle link may carry (nothing is expected; a margin against flakes)


def plan_for(sync: str) -> dict:
    sc = load_scenario(DATA / "tiny_two_buildings.yaml")
    return build_network_plan(sc, resolve_plan(sc.with_parallel(dp_sync=sync)))


@pytest.mark.parametrize("target", ["softswitch", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_plan_paths_and_trees_on_testbed(target, tmp_path, capsys):
    if target == "bmv2" and not (DEFAULT_BMV2_JSON.exists() and shutil.which("simple_switch_grpc")):
        pytest.skip("BMv2 or p4/build/netco.json missing")
    topo = read_topology(DATA / "two_uplinks.yaml")
    inst = install_plan(plan_for("thc"), topo)
    cfg = with_free_ports(inst.config)
    tag = f"s{os.getpid() % 1000}{target[0]}"
    tb = Testbed(cfg, target=target, tag=tag, workdir=tmp_path)
    try:
        report = tb.up()
        ifs = {ln["link"]: (ln["a_if"], ln["b_if"]) for ln in report["links"]}
        assert set(UPLINKS.values()) == set(ifs)

        def tx() -> dict[str, tuple[int, int]]:
            """uplink -> packets sent (building end, cross end)."""
            return {u: tuple(int(Path(f"/sys/class/net/{i}/statistics/tx_packets").read_text())
                             for i in ifs[lbl]) for u, lbl in UPLINKS.items()}

        def settle(quiet: float = 0.5, limit: float = 15.0) -> dict[str, tuple[int, int]]:
            """Counters once the uplinks have been idle for ``quiet`` s: a slow switch (BMv2)
            may still answer queued retransmissions after the workers are done."""
            last, since, end = tx(), time.monotonic(), time.monotonic() + limit
            while time.monotonic() < end:
                time.sleep(0.1)
                now = tx()
                if now != last:
                    last, since = now, time.monotonic()
                elif time.monotonic() - since >= quiet:
                    break
            return last

        def delta(a, b):
            return {u: (b[u][0] - a[u][0], b[u][1] - a[u][1]) for u in a}

        # ---- 1. DP groups along the planned trees
        size, seed = 4096, 5
        index = {j.name: k for k, j in enumerate(sorted(cfg.jobs, key=lambda j: j.id))}
        roots = {j["job"]: j["root"] for j in inst.jobs}
        assert roots == {"dp-pp0-tp0": "x0", "dp-pp0-tp1": "x1"}
        for name in ("dp-pp0-tp1", "dp-pp0-tp0"):  # the non-default uplink first
            root = roots[name]
            other = "x0" if root == "x1" else "x1"
            jb = tb.job(name)
            assert jb.members == ("a1", "a2", "b1", "b2")
            t0 = settle()
            outs = tb.allreduce(lambda r, k, s=seed: tensor(s, r, k, size), job=name, timeout=60)
            d = delta(t0, settle())
            codec = tb.codec(jb)
            ref = simulate(codec, [tensor(seed, r, 0, size) for r in range(4)], round=0).average
            for r in range(4):
                torch.testing.assert_close(outs[r][0], ref, rtol=0, atol=0)
            per_worker = packets_per_allreduce(codec, size)
            for b in ("A", "B"):
                up, down = d[f"{b}-x{root[1]}"]
                assert up >= per_worker and down >= per_worker, (name, b, d)  # partials up, results down
                assert max(d[f"{b}-x{other[1]}"]) <= NOISE, (name, b, d)     # the other uplink idle
            ctr = tb.counters()
            idx = index[name]
            for sw in ("a-leaf", "b-leaf", root):  # each adds two contributors per packet
                assert ctr[sw]["ingress.thc_slot.contributions"].get(idx, 0) == 2 * per_worker, sw
                bad = {DropReason(i).name: n for i, n in ctr[sw]["ingress.drops"].items()
                       if n and i not in (DropReason.DUPLICATE, DropReason.STALE)}
                assert bad == {}, sw
            assert ctr[root]["ingress.thc_output.results"].get(idx, 0) == per_worker
            assert ctr[other]["ingress.thc_slot.contributions"].get(idx, 0) == 0

        # ---- 2. routed paths: default first, then the hierarchical plan's paths
        def pings(src: str, dst: str, n: int = 20) -> dict[str, tuple[int, int]]:
            # neighbour resolution first, so that the counted pings all find their path set up
            # (a loaded machine lost one of 20 to it)
            tb.cmd(src, ["ping", "-n", "-q", "-c", "3", "-i", "0.05", "-W", "2",
                         cfg.host(dst).ip])
            t0 = settle()
            out = tb.cmd(src, ["ping", "-n", "-q", "-c", str(n), "-i", "0.01", "-W", "2",
                               cfg.host(dst).ip])
            assert f"{n} received" in out, out
            return delta(t0, settle())

        d = pings("a1", "b2")  # before: shortest paths, over x0 both ways
        assert d["A-x0"][0] >= 20 and d["B-x0"][0] >= 20 and d["A-x1"][0] <= NOISE, d

        # through the CLI, as an operator would: netco controller apply TOPO --plan PLAN
        live = copy.deepcopy(topo)
        for sw in live["switches"]:
            sw.update(address=tb.cfg_eff.switch(sw["name"]).address, target=tb.choice.target)
        (tmp_path / "topo.yaml").write_text(yaml.safe_dump(live))
        (tmp_path / "hier.json").write_text(json.dumps(plan_for("hierarchical")))
        argv = [str(tmp_path / "topo.yaml"), "--plan", str(tmp_path / "hier.json")]
        capsys.readouterr()
        assert netco_main(["controller", "apply", *argv, "--json", "--timeout", "30"]) == 0
        applied = json.loads(capsys.readouterr().out)
        assert applied["writes"] > 0 and all(r["ok"] for r in applied["switches"])
        assert netco_main(["controller", "diff", *argv, "--timeout", "30"]) == 0  # in sync
        hier = install_files(tmp_path / "topo.yaml", tmp_path / "hier.json")
        dealt = {p["dst"]: p["uplinks"] for f in hier.flows for p in f.get("installed", [])}
        assert dealt == {"b1": ["A-x0", "B-x0"], "b2": ["A-x1", "B-x1"],
                         "a1": ["B-x0", "A-x0"], "a2": ["B-x1", "A-x1"]}
        for src, dst in (("a1", "b2"), ("a2", "b1")):
            d = pings(src, dst)
            there, back = dealt[dst][0], dealt[src][0]   # uplink out of each building
            assert d[there][0] >= 20 and d[back][0] >= 20, (src, dst, d)
            for u in UPLINKS:
                if u not in (there, back):
                    assert d[u][0] <= NOISE, (src, dst, u, d)
            # and the cross switch of the planned path forwarded it down the other side
            assert d[dealt[dst][1]][1] >= 20 and d[dealt[src][1]][1] >= 20, (src, dst, d)
    finally:
        removed = tb.down()
    assert removed["left"] == []
    assert leftovers(tag, [*(s.address for s in cfg.switches), str(tmp_path)]) == []
