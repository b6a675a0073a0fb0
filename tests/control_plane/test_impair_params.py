"""Impairment parameters, node modes and commands, the forwarder's decisions and the probe
verdicts — everything that needs no root (the namespace tests are in test_impair_node.py)."""

from __future__ import annotations

import socket

import pytest

from control_plane.testbed.impair import Impairment
from control_plane.testbed.impair.__main__ import build_parser
from control_plane.testbed.impair.forwarder import Forwarder
from control_plane.testbed.impair.node import choose_mode, forwarder_command, nft_ruleset, setup_commands
from control_plane.testbed.impair.probe import ProbeResult, probes_needed, problems


def test_validation_names_the_field():
    with pytest.raises(ValueError, match="loss_pct=120"):
        Impairment(loss_pct=120)
    with pytest.raises(ValueError, match="delay_ms=-1"):
        Impairment(delay_ms=-1)
    with pytest.raises(ValueError, match="bandwidth_mbps=0"):
        Impairment(bandwidth_mbps=0)
    with pytest.raises(ValueError, match="unknown fields"):
        Impairment.from_dict({"delay": 3})
    imp = Impairment(delay_ms=5, loss_pct=1, bandwidth_mbps=50)
    assert Impairment.from_dict(imp.to_dict()) == imp
    assert imp.describe() == "delay 5ms loss 1% 50Mbit/s"


def test_modes():
    assert not Impairment().active
    assert choose_mode(Impairment(loss_pct=1), netem=False) == "bridge"
    assert choose_mode(Impairment(bandwidth_mbps=10), netem=False) == "bridge"
    assert choose_mode(Impairment(delay_ms=5, loss_pct=1), netem=False) == "forwarder"
    assert choose_mode(Impairment(reorder_pct=1), netem=False) == "forwarder"
    assert choose_mode(Impairment(delay_ms=5), netem=True) == "netem"
    assert choose_mode(Impairment(bandwidth_mbps=10), netem=True) == "bridge"


def test_commands():
    imp = Impairment(loss_pct=2.5, bandwidth_mbps=20)
    cmds = [" ".join(c) for c in setup_commands(imp, "eth0", "eth1", "bridge")]
    assert any("type bridge" in c for c in cmds)
    assert sum("tbf rate 20mbit" in c for c in cmds) == 2  # both egresses
    assert "numgen random mod 10000 < 250" in nft_ruleset(imp)
    assert nft_ruleset(Impairment(bandwidth_mbps=1)) == ""
    net = [" ".join(c) for c in setup_commands(Impairment(delay_ms=5, jitter_ms=1, loss_pct=1,
                                                          bandwidth_mbps=10), "a", "b", "netem")]
    assert any("parent 1:1 handle 10: netem delay 5ms 1ms loss 1%" in c for c in net)
    fwd = [" ".join(c) for c in setup_commands(Impairment(delay_ms=5), "a", "b", "forwarder")]
    assert not any("bridge" in c or "tbf" in c for c in fwd)


def test_forwarder_command_round_trips():
    imp = Impairment(delay_ms=7.5, jitter_ms=1, loss_pct=0.5, dup_pct=2, reorder_pct=3,
                     reorder_gap_ms=4, seed=11)
    cmd = forwarder_command(imp, "eth0", "eth1", python="python")
    args = build_parser().parse_args(cmd[3:])
    back = Impairment(delay_ms=args.delay_ms, jitter_ms=args.jitter_ms, loss_pct=args.loss_pct,
                      dup_pct=args.dup_pct, reorder_pct=args.reorder_pct,
                      reorder_gap_ms=args.reorder_gap_ms, seed=args.seed)
    assert back == imp and (args.a, args.b) == ("eth0", "eth1")


def _fwd(imp: Impairment):
    a_in, a_out = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    b_in, b_out = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (a_in, b_in):
        s.setblocking(False)  # a full pair counts as overflow instead of blocking
    fwd = Forwarder("a", "b", imp, socks=(a_in, b_in))
    return fwd, a_out, b_out


def _drain(s: socket.socket) -> list[bytes]:
    s.setblocking(False)
    out = []
    while True:
        try:
            out.append(s.recv(100))
        except BlockingIOError:
            return out


def test_forwarder_decisions_are_seeded_and_statistical():
    imp = Impairment(loss_pct=5, dup_pct=3, seed=5)
    fwd, _, b_out = _fwd(imp)
    got = []
    for i in range(4000):
        fwd._admit(0, i.to_bytes(4, "big"), 0.0)
        got += _drain(b_out)  # AF_UNIX pairs queue only a few datagrams
    st = fwd.dirs[0].stats
    assert st.overflow == 0
    assert st.received == 4000
    assert 140 <= st.dropped <= 260       # 5 % of 4000 = 200
    assert 70 <= st.duplicated <= 175     # 3 % of 3800 = 114
    assert len(got) == 4000 - st.dropped + st.duplicated
    runs = []
    for _ in range(2):
        f, _, out = _fwd(imp)
        seen = []
        for i in range(300):
            f._admit(0, i.to_bytes(4, "big"), 0.0)
            seen += _drain(out)
        runs.append(seen)
    assert runs[0] == runs[1]  # same seed, same decisions


def test_forwarder_holds_delays_and_reorders():
    fwd, _, b_out = _fwd(Impairment(delay_ms=10))
    for i in range(5):
        fwd._admit(0, bytes([i]), now=1.0)
    fwd._release(1.0099)
    assert _drain(b_out) == []
    fwd._release(1.0101)
    assert _drain(b_out) == [bytes([i]) for i in range(5)]  # constant delay keeps the order
    assert fwd.stats()["held"] == 0
    fwd, _, b_out = _fwd(Impairment(reorder_pct=50, reorder_gap_ms=5, seed=3))
    got: list[int] = []
    for i in range(40):
        fwd._admit(0, bytes([i]), now=2.0 + i * 1e-4)
        fwd._release(2.0 + i * 1e-4)
        got += [b[0] for b in _drain(b_out)]
    t = 2.004
    while fwd.stats()["held"]:  # release held frames a millisecond at a time
        t += 0.001
        fwd._release(t)
        got += [b[0] for b in _drain(b_out)]
    assert sorted(got) == list(range(40)) and got != list(range(40))
    assert fwd.dirs[0].stats.reordered > 5


def test_probe_verdicts():
    assert probes_needed(Impairment(loss_pct=1)) == 1500
    assert probes_needed(Impairment(loss_pct=0.01)) == 20000
    imp = Impairment(loss_pct=1, delay_ms=5)
    good = ProbeResult(sent=1500, received=1485, delays_ms=[5.2] * 1485)
    assert problems(imp, good) == []
    no_loss = ProbeResult(sent=1500, received=1500, delays_ms=[5.2] * 1500)
    assert any("loss asked 1%" in p for p in problems(imp, no_loss))
    no_delay = ProbeResult(sent=1500, received=1485, delays_ms=[0.1] * 1485)
    assert any("delay asked 5 ms" in p for p in problems(imp, no_delay))
    fast = ProbeResult(sent=100, received=100, delays_ms=[0.1] * 100, rate_mbps=900, send_rate_mbps=950)
    assert any("not capped" in p for p in problems(Impairment(bandwidth_mbps=50), fast))
    assert problems(Impairment(delay_ms=1), ProbeResult(sent=10)) == [
        "no probe arrived out of 10: the link does not pass frames"]
