"""End to end on BMv2: the controller alone programs a two-level tree that then aggregates.

Uses the packet tests' :class:`~tests.support.aggnet.Bmv2Network` only for what is not
the controller's job — processes, namespaces, veth pairs and raw frames at the hosts. The
config is written from that topology; the controller (election id 20, above the fixture's
own session) pushes nothing by hand-made entries: everything comes from ``apply``. Needs root,
``simple_switch_grpc`` and the compiled program (``p4/build`` or ``NETCO_TEST_P4BUILD``).
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from control_plane.config import parse_config
from control_plane.controller import Controller
from host.protocol import codec
from host.protocol import layout as lay
from tests.support.aggnet import P4_INFO, P4_JSON, Bmv2Network
from tests.support.frames import thc_frame, thc_only

LEAF = {"a0": "leaf0", "a1": "leaf0", "b0": "leaf1", "b1": "leaf1"}

pytestmark = [pytest.mark.root, pytest.mark.bmv2]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    if not P4_JSON.exists():
        pytest.skip(f"{P4_JSON} missing (compile the P4 program)")
    net = Bmv2Network(tmp_path_factory.mktemp("ctl-bmv2"), prefix=f"ncc{os.getpid() % 10000}")
    for s in ("root", "leaf0", "leaf1"):
        net.add_switch(s)
    for h, leaf in LEAF.items():
        net.add_host(h, leaf)
    links = {leaf: net.link(leaf, "root") for leaf in ("leaf0", "leaf1")}
    net.start()
    try:
        yield net, links
    finally:
        net.stop()


def config(net, links) -> dict:
    return {
        "controller": {"election_id": 20, "p4info": str(P4_INFO), "bmv2_json": str(P4_JSON)},
        "switches": [{"name": s, "address": f"127.0.0.1:{net.switches[s].grpc_port}",
                      "addr": net.switch_ip(s), "mac": f"02:00:00:00:ff:0{i}"}
                     for i, s in enumerate(("root", "leaf0", "leaf1"), start=1)],
        "hosts": [{"name": h, "mac": net.hosts[h].mac, "ip": net.hosts[h].ip,
                   "attach": f"{LEAF[h]}:{net.hosts[h].port}"} for h in LEAF],
        "links": [{"a": f"{leaf}:{lp}", "b": f"root:{rp}"} for leaf, (lp, rp) in links.items()],
        "jobs": [{"name": "j", "id": 9, "members": list(LEAF), "thc": {"g": 30}}],
    }


def test_controller_programs_a_working_tree(tree) -> None:
    net, links = tree
    cfg = parse_config(config(net, links))
    ctl = Controller(cfg)
    res = asyncio.run(ctl.apply())
    assert all(r.ok and r.in_sync_after for r in res), [r.error for r in res]
    assert ctl.writes == sum(len(v) for v in ctl.desired.values())
    for h in LEAF:
        net.flush(h)
    rng = np.random.default_rng(5)
    table = np.asarray(cfg.jobs[0].thc.table)
    for rnd in range(2):
        idx = {h: rng.integers(0, 16, lay.COORDS_PER_PACKET) for h in LEAF}
        for rank, h in enumerate(LEAF):
            hd = codec.Header(msg_type=lay.MsgType.DATA, job_id=9, slot=0, round=rnd, rank=rank,
                              token=ctl.tokens[9])
            net.send(h, thc_frame(net.hosts[h], net.switch_ip(LEAF[h]), hd, idx[h]))
        want = np.sum([table[i] for i in idx.values()], axis=0)
        for h in LEAF:
            got = thc_only(net.recv(h, count=1, timeout=3.0))
            assert len(got) == 1, f"{h}: no result in round {rnd}"
            r = got[0]
            assert r.msg.msg_type is lay.MsgType.RESULT and r.msg.header.round == rnd
            assert (r.msg.header.count, r.msg.header.bitmap) == (4, 0b1111)
            assert (r.dst_ip, r.dst_mac) == (net.hosts[h].ip, net.hosts[h].mac)
            np.testing.assert_array_equal(r.msg.values, want)
    # the second apply writes nothing; the drop counters stayed at zero
    again = Controller(cfg)
    asyncio.run(again.apply())
    assert again.writes == 0
    for r in asyncio.run(again.status()):
        assert r.ok and not any(r.counters["ingress.drops"].values()), (r.switch, r.counters)


def test_routes_carry_ordinary_traffic_across_the_tree(tree) -> None:
    net, links = tree
    cfg = parse_config(config(net, links))
    asyncio.run(Controller(cfg).apply())
    for h in LEAF:
        net.flush(h)
    a0, b1 = net.hosts["a0"], net.hosts["b1"]
    pkt = (Ether(src=a0.mac, dst="02:00:00:00:ff:02") / IP(src=a0.ip, dst=b1.ip, ttl=64)
           / UDP(sport=5000, dport=5001) / b"hello")
    net.send("a0", bytes(pkt))
    got = [Ether(f) for f in net.recv("b1", count=1, timeout=3.0)]
    assert got, "routed packet did not reach b1"
    p = got[0]
    # leaf0 -> root -> leaf1: three hops; the last rewrite is leaf1's MAC -> b1's MAC
    assert (p[IP].src, p[IP].dst, p[IP].ttl) == (a0.ip, b1.ip, 61)
    assert (p[Ether].src, p[Ether].dst) == ("02:00:00:00:ff:03", b1.mac)
    assert bytes(p[UDP].payload) == b"hello"


def test_a_rank_that_stays_dead_is_learned_from_bmv2s_counters(tree, tmp_path) -> None:
    """Issue 33: BMv2 cannot learn an absent rank; its controller can, as a user runs it:
    ``netco controller apply FILE --watch 0.2 --dead-after 0.5``. A partial-policy job on leaf0
    (a0 rank 0, a1 rank 1); a1 sends nothing. The watch reads BMv2's ``rank_contributions``
    over P4Runtime, finds rank 1 standing still while rank 0 contributes, and installs the job
    with ``expected`` 1: a0's next packet is released at once, with no ``DEADLINE``. When a1
    contributes again its count moves and the job waits for both again."""
    import json
    import queue
    import subprocess
    import sys
    import threading
    import time

    import yaml

    from control_plane.tokens import ENV_STATE_DIR
    from host.paths import REPO

    net, links = tree
    # The fixture's own finsy sessions are backups; when a primary leaves, finsy's arbitrator
    # bids the leaving primary's election id for them (simple_switch_grpc's "next backup
    # becomes primary" update), so that the watch's next round would find its id taken.
    net.close_sessions()
    raw = config(net, links)
    raw["controller"]["election_id"] = 21
    raw["jobs"].append({"name": "p", "id": 11, "members": ["a0", "a1"], "policy": "partial",
                        "thc": {"g": 30}, "slot_base": 64, "num_slots": 8})
    f = tmp_path / "net.yaml"
    f.write_text(yaml.safe_dump(raw))
    cfg = parse_config(raw)
    table = np.asarray(cfg.jobs[1].thc.table)
    rng = np.random.default_rng(11)
    env = dict(os.environ, **{ENV_STATE_DIR: str(tmp_path / "state")})
    once = subprocess.run([sys.executable, "-m", "control_plane.cli.main", "controller", "apply",
                           str(f), "--json"], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=120)
    assert once.returncode == 0, once.stderr
    token = json.loads(once.stdout)["tokens"]["11"]

    def send(host: str, rank: int, slot: int, rnd: int = 0, flags: int = 0) -> np.ndarray:
        idx = rng.integers(0, 16, lay.COORDS_PER_PACKET)
        hd = codec.Header(msg_type=lay.MsgType.DATA, job_id=11, slot=slot, round=rnd, rank=rank,
                          token=token, flags=flags)
        net.send(host, thc_frame(net.hosts[host], net.switch_ip("leaf0"), hd, idx))
        return table[idx]

    def results(host: str, timeout: float, slot: int) -> list:
        """``host``'s results for ``slot`` within ``timeout`` (the multicast of other slots'
        results to it skipped)."""
        end, out = time.monotonic() + timeout, []
        while time.monotonic() < end and not out:
            got = thc_only(net.recv(host, count=1, timeout=max(0.01, end - time.monotonic())))
            out += [r.msg for r in got if r.msg.header.slot == slot]
        return out

    for h in ("a0", "a1"):
        net.flush(h)
    proc = subprocess.Popen([sys.executable, "-m", "control_plane.cli.main", "controller",
                             "apply", str(f), "--watch", "0.2", "--dead-after", "0.5",
                             "--rounds", "100", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(json.loads(x)) for x in proc.stdout],
                     daemon=True).start()

    def change(keep_sending: bool) -> dict:
        """The next rank change the watch reports (a0 contributing meanwhile if asked)."""
        t0, rnd = time.monotonic(), 0
        while time.monotonic() - t0 < 15:
            if keep_sending:     # START: a fresh copy each time; each one a contribution
                send("a0", 0, 7, rnd, flags=int(lay.Flag.START))
                rnd += 2
            try:
                got = lines.get(timeout=0.1)
            except queue.Empty:
                continue
            assert all(s["ok"] for s in got["switches"]), got
            if got["ranks"]:
                return got["ranks"]
        raise AssertionError("the watch reported no change")

    try:
        assert change(keep_sending=True) == [
            {"switch": "leaf0", "job": "p", "job_id": 11, "rank": 1, "absent": True,
             "silent_s": pytest.approx(0.5, abs=0.6), "expected": 1}]
        want = send("a0", 0, 1)                   # released at once: expected is 1
        (r,) = results("a0", 3.0, 1)
        assert (r.header.slot, r.header.count, r.header.bitmap) == (1, 1, 0b01)
        np.testing.assert_array_equal(r.values, want)
        send("a1", 1, 2)                          # a1 is back: counted (alone, expected 1)
        assert len(results("a1", 3.0, 2)) == 1
        assert [(c["rank"], c["absent"], c["expected"]) for c in change(keep_sending=False)] \
            == [(1, False, 2)]
        want = send("a0", 0, 3)
        assert not results("a0", 0.3, 3)          # waits for a1 again
        want = want + send("a1", 1, 3)
        (r,) = results("a0", 3.0, 3)
        assert (r.header.slot, r.header.count, r.header.bitmap) == (3, 2, 0b11)
        np.testing.assert_array_equal(r.values, want)
    finally:
        proc.terminate()
        proc.wait(10)
