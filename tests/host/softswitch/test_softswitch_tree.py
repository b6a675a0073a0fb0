"""The aggregation tree on the software target's C path (issue 17): two leaf switches under a
root, each a ``python -m host.softswitch`` process over UDP tunnels, run with its C loop and
with the C path off (``NETCO_SOFTSWITCH_C=0``, the reference).

Both runs must give the same exact sums (a clean round, a round with a dead rank released by
DEADLINE, a retransmission answered by the leaf). With the C path, no batch of the run may be
handed to the Python pipeline: the leaves' partials, the root's children's partials, the
parent's results at the leaves and the DEADLINE requests all stay in C (the switches' final
``--json`` statistics, ``c_loop.handoffs``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from host.protocol import layout as lay
from host.protocol.layout import Flag, MsgType
from host.softswitch.switch import SoftSwitch
from tests.support.aggnet import SoftswitchNetwork
from tests.support.frames import collect
from tests.support.jobs import TABLE
from tests.support.tree import HOSTS, LEAF, full_round, install_tree_job, send_data

C = lay.COORDS_PER_PACKET
SWITCHES = ("root", "leaf0", "leaf1")


def _tree(workdir: Path) -> SoftswitchNetwork:
    net = SoftswitchNetwork(workdir, wiring="tunnel", switch_args=("--json",))
    for s in SWITCHES:
        net.add_switch(s)
    for h in HOSTS:
        net.add_host(h, LEAF[h])
    net.links = {"leaf0": net.link("leaf0", "root"), "leaf1": net.link("leaf1", "root")}
    return net


def _final_stats(log: Path) -> dict:
    """The last ``--json`` statistics line a switch printed on exit."""
    for line in reversed(log.read_text().splitlines()):
        if line.startswith("{") and '"c_loop"' in line:
            return json.loads(line)
    raise AssertionError(f"{log}: no final statistics")


def _scenario(net: SoftswitchNetwork) -> list[tuple]:
    """Clean rounds, a dead rank (b1) released by DEADLINE, a retransmission; returns what every
    host received (round, count, bitmap, flags, values)."""
    rng = np.random.default_rng(5)
    t = np.asarray(TABLE)
    seen: list[tuple] = []
    for rnd in range(3):                                   # clean: every worker contributes
        got, want = full_round(net, rng, 0, rnd)
        for h in HOSTS:
            assert len(got[h]) == 1, f"{h}: {len(got[h])} results in round {rnd}"
            r = got[h][0]
            assert r.msg.msg_type is MsgType.RESULT and r.msg.header.count == 4
            np.testing.assert_array_equal(r.msg.values, want)
            seen.append((h, rnd, r.msg.header.count, r.msg.header.bitmap, r.msg.values.tolist()))
    # b1 is dead: leaf0 completes and sends its partial up; b0 asks leaf1 to release (DEADLINE)
    idxs = {h: rng.integers(0, 16, C) for h in ("a0", "a1", "b0")}
    for h in ("a0", "a1", "b0"):
        send_data(net, h, 1, 0, idxs[h])
    time.sleep(0.5)                                        # leaf0's partial reaches the root
    send_data(net, "b0", 1, 0, idxs["b0"], flags=Flag.RETX | Flag.DEADLINE)
    got = collect(net, HOSTS, more=4)
    want = np.sum([t[i] for i in idxs.values()], axis=0)
    for h in HOSTS:
        assert len(got[h]) == 1, f"{h}: {len(got[h])} results with a dead rank"
        r = got[h][0]
        assert r.msg.header.count == 3 and r.msg.header.bitmap == 0b0111
        np.testing.assert_array_equal(r.msg.values, want)
        seen.append((h, "dead", r.msg.header.count, r.msg.header.bitmap, r.msg.values.tolist()))
    # a0 retransmits round 2 of slot 0: leaf0 answers with the stored result alone
    send_data(net, "a0", 0, 2, np.zeros(C, dtype=np.int64), flags=Flag.RETX)
    got = collect(net, HOSTS, more=4, timeout=1.0)
    assert [len(got[h]) for h in HOSTS] == [1, 0, 0, 0]
    r = got["a0"][0]
    assert r.msg.header.flags & Flag.RESENT and r.msg.header.count == 4
    seen.append(("a0", "resent", r.msg.header.count, r.msg.header.bitmap, r.msg.values.tolist()))
    return seen


@pytest.mark.parametrize("c_path", ["1", "0"])
def test_tree_runs_in_c_and_sums_as_the_reference(c_path, tmp_path, monkeypatch):
    monkeypatch.setenv("NETCO_SOFTSWITCH_C", c_path)
    if c_path == "1" and not SoftSwitch.c_loop_available():
        pytest.skip("the C loop (host/softswitch/_fastpath) is not built")
    net = _tree(tmp_path)
    net.start()
    try:
        install_tree_job(net)
        seen = _scenario(net)
    finally:
        net.stop()
    assert len(seen) == 4 * 3 + 4 + 1
    stats = {s: _final_stats(net.switches[s].log_path) for s in SWITCHES}
    for s, st in stats.items():
        assert st["drops"] == {}, f"{s}: {st['drops']}"
        if c_path == "1":
            # every batch of the run taken by the C loop: none handed to the Python pipeline
            assert st["c_loop"]["handoffs"] == 0, f"{s}: {st['c_loop']}"
            assert st["c_loop"]["batches"] > 0
        else:
            assert st["c_loop"]["batches"] == 0
    leaf0, leaf1, root = stats["leaf0"]["outcomes"], stats["leaf1"]["outcomes"], stats["root"]["outcomes"]
    assert leaf0 == {"contribution": 8, "parent_result": 4, "resent": 1}
    assert leaf1 == {"contribution": 7, "parent_result": 4, "release": 1}
    assert root == {"contribution": 8}
