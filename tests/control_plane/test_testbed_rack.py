"""A Mininet rack: four hosts under one switch run the THC all-reduce.

Runs with the software target (a worker process inside each host), and with BMv2 when
``simple_switch_grpc`` and the compiled program are present (workers as threads whose raw
sockets were opened in the hosts, to keep the file short). The results must equal the
in-process THC simulation bit for bit, the switch must count exactly the contributions sent
and drop nothing but retransmissions, and teardown must leave no interface or process behind.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from control_plane.config import DEFAULT_BMV2_JSON, load_config
from control_plane.testbed.net import Testbed, with_free_ports
from control_plane.testbed.worker import tensor
from host.paths import REPO
from host.protocol.layout import DropReason
from host.thc.simulate import allreduce as simulate
from tests.support.testbed import leftovers, packets_per_allreduce

pytestmark = [pytest.mark.root, pytest.mark.mininet]
TARGETS = ["softswitch", pytest.param("bmv2", marks=pytest.mark.bmv2)]


@pytest.mark.parametrize("target", TARGETS)
def test_rack_allreduce_in_host_processes(target, tmp_path):
    if target == "bmv2" and not DEFAULT_BMV2_JSON.exists():
        pytest.skip(f"{DEFAULT_BMV2_JSON} not built (netco p4 build needs p4c)")
    cfg = with_free_ports(load_config(REPO / "mininet" / "rack.yaml"))
    tag = f"r{os.getpid() % 1000}{target[0]}"
    grpc = [s.address for s in cfg.switches]
    tb = Testbed(cfg, target=target, tag=tag, workdir=tmp_path)
    try:
        report = tb.up()
        assert report["target"] == target
        assert [c["in_sync"] for c in report["controller"]] == [True]
        # addresses, static ARP and routes: ordinary IPv4 routed by the switch program
        assert tb.ping("h1", "h4") and tb.ping("h3", "h2")
        assert "10.0.0.254 dev eth0 lladdr 02:4e:43:00:00:01 PERMANENT" in tb.cmd("h1", ["ip", "neigh"])
        size, seed, rounds = 3000, 7, 2
        codec = tb.codec(tb.job())
        if target == "softswitch":  # one process per host (a torch import each: ~20 s here)
            res = tb.run_workers(size=size, seed=seed, rounds=rounds, timeout=150)
            outs = [[np.load(res[h]["out"])[k] for k in range(rounds)] for h in tb.job().members]
        else:  # same frames from threads whose sockets live in the hosts (keeps the file short)
            outs = tb.allreduce(lambda r, k: tensor(seed, r, k, size), rounds=rounds)
            outs = [[o.numpy() for o in per] for per in outs]
        for rnd in range(rounds):
            ref = simulate(codec, [tensor(seed, r, rnd, size) for r in range(4)], round=rnd).average
            for r in range(4):
                np.testing.assert_array_equal(outs[r][rnd], ref.numpy(), err_msg=f"rank {r} round {rnd}")
        ctr = tb.counters()["tor"]
        # retransmissions of early workers waiting for late ones are dropped as DUPLICATE (the
        # protocol's design); any other drop means a wrong address, entry or frame
        bad = {DropReason(i).name: n for i, n in ctr["ingress.drops"].items()
               if n and i != DropReason.DUPLICATE}
        assert bad == {}
        # worker processes leave through the closing exchange: one NORM packet each (H3,
        # docs/transport.md "Leaving a job"); the threads of the BMv2 case do not leave the job
        closing = 4 if target == "softswitch" else 0
        assert (ctr["ingress.thc_slot.contributions"][0]
                == 4 * rounds * packets_per_allreduce(codec, size) + closing)
    finally:
        removed = tb.down()
    assert removed["left"] == []
    assert leftovers(tag, [*grpc, str(tmp_path)]) == []
