"""Differential test: the same frames into BMv2 (the v1model program) and into the software
target give the same frames out, byte for byte, and the same drop counters.

Needs root, BMv2 and p4c (markers); where they are present this is the strongest check that
the software target "behaves exactly like the P4 program"."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from host.protocol import codec
from host.protocol import layout as lay
from host.protocol.layout import Flag, MsgType
from host.softswitch.frames import udp_frame
from host.thc.table import DEFAULT_TABLE
from tests.support.aggnet import Bmv2Network, SoftswitchNetwork, SwitchJob, Worker
from tests.support.token import TOKEN

pytestmark = [pytest.mark.root, pytest.mark.bmv2, pytest.mark.p4c]

HOSTS = ["w0", "w1", "w2", "x"]
TABLE = list(DEFAULT_TABLE)   # THC's default table (b = 4, g = 30)
C = lay.COORDS_PER_PACKET
SWITCH_MAC = "02:00:00:00:ff:fe"


def _net(kind: str, workdir: Path):
    if kind == "bmv2":
        net = Bmv2Network(workdir, prefix=f"ncd{kind[0]}{Path(workdir).name[-3:]}")
    else:
        net = SoftswitchNetwork(workdir, wiring="tunnel")
    net.add_switch("s0")
    for h in HOSTS:
        net.add_host(h, "s0")
    net.start()
    return net


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    made = {}
    try:
        for kind in ("bmv2", "softswitch"):
            made[kind] = _net(kind, tmp_path_factory.mktemp(kind))
        for net in made.values():
            workers = [Worker(r, net.hosts[h].port, net.hosts[h].ip, net.hosts[h].mac)
                       for r, h in enumerate(HOSTS[:3])]
            net.install_job("s0", SwitchJob(job_id=9, index=1, table=TABLE, lane_bits=8,
                                            self_ip=net.switch_ip("s0"), contributors=workers))
        yield made
    finally:
        for net in made.values():
            net.stop()


def _frame(net, host: str, hdr: codec.Header, values) -> bytes:
    h = net.hosts[host]
    return udp_frame(h.mac, SWITCH_MAC, h.ip, net.switch_ip("s0"), codec.encode(hdr, values))


def _script(rng) -> list[tuple[str, dict, np.ndarray]]:
    """(host, header fields, values) in order: completion, retransmissions, PEEK, DEADLINE
    with a late sender, norms, copy reuse, and rejected packets."""
    idx = [rng.integers(0, 16, C) for _ in range(3)]
    d = lambda r, slot, rnd, flags=0, **kw: (  # noqa: E731
        HOSTS[r], dict(msg_type=MsgType.DATA, job_id=9, slot=slot, round=rnd, rank=r, flags=flags, **kw),
        idx[r])
    norms = [rng.uniform(0, 9, 32).astype(np.float32) for _ in range(3)]
    return [
        d(0, 0, 0), d(1, 0, 0), d(1, 0, 0, Flag.RETX), d(2, 0, 0, chunk_offset=512),
        d(0, 0, 0, Flag.RETX),
        d(0, 1, 0, Flag.PEEK), d(0, 1, 0), d(1, 1, 0, Flag.RETX | Flag.DEADLINE), d(2, 1, 0),
        *[(HOSTS[r], dict(msg_type=MsgType.NORM, job_id=9, slot=2, round=0, rank=r, lane_bits=32),
           norms[r]) for r in range(3)],
        d(2, 0, 2), d(1, 0, 2), d(0, 0, 2, Flag.PEEK), d(0, 0, 2),     # copy 0 reused
        d(0, 0, 1, Flag.RETX),                     # into the empty copy 1: a contribution
        ("x", dict(msg_type=MsgType.DATA, job_id=9, slot=0, round=4, rank=0), idx[0]),
        d(0, 9, 0),                                # slot out of range
        d(1, 0, 4, Flag.PEEK),                     # status of a round the copy does not hold
        d(0, 0, 0),                                # older than copy 0's round 2: stale
        d(2, 0, 5),                                # copy 1 collects round 1: 5 skips 3, a lap
        d(1, 0, 6),                                # copy 0 released round 2: 6 skips 4, a lap
        ("w0", "short", idx[0]), ("w0", "version", idx[0]), ("w0", "unrouted", idx[0]),
    ]


def _run(net, script) -> tuple[dict[str, list[bytes]], dict[int, int]]:
    for h in HOSTS:
        net.flush(h)
    before = net.drop_counts("s0")
    got: dict[str, list[bytes]] = {h: [] for h in HOSTS}
    for host, fields, values in script:
        for h in HOSTS:   # what the previous frame caused has arrived by now
            got[h] += net.recv(h, count=64, timeout=0.002)
        if isinstance(fields, str):                # raw cases: SHORT, BAD_VERSION, NO_ROUTE
            h = net.hosts[host]
            good = codec.encode(codec.Header(token=TOKEN, msg_type=MsgType.DATA, job_id=9, slot=3, round=0,
                                             rank=0), values)
            payload = {"short": good[:60], "version": b"\x07" + good[1:], "unrouted": b"hello"}[fields]
            port = lay.THC_UDP_PORT if fields != "unrouted" else 9
            frame = udp_frame(h.mac, SWITCH_MAC, h.ip, "192.0.2.1" if fields == "unrouted"
                              else net.switch_ip("s0"), payload, sport=port, dport=port)
            net.send(host, frame)
        else:
            net.send(host, _frame(net, host, codec.Header(**{"token": TOKEN, **fields}), values))
        time.sleep(0.03)
    time.sleep(0.3)
    for h in HOSTS:
        got[h] += net.recv(h, count=64, timeout=0.05)
    after = net.drop_counts("s0")
    drops = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    return got, drops


def test_same_frames_out_and_same_drops(nets):
    rng = np.random.default_rng(3)
    script = _script(rng)
    out = {k: _run(net, script) for k, net in nets.items()}
    (bg, bd), (sg, sd) = out["bmv2"], out["softswitch"]
    assert sd == bd
    for h in HOSTS:
        assert [f.hex() for f in sg[h]] == [f.hex() for f in bg[h]], h
    assert sum(len(v) for v in bg.values()) > 10     # the script provoked real traffic
    assert len(bd) >= 6                               # and drops of several reasons


def _random_script(seed: int, n: int = 40) -> list[tuple[str, dict, np.ndarray]]:
    """Random contributions (3 workers and an intruder, 2 slots, rounds 0..4, DATA or NORM,
    RETX/DEADLINE/PEEK flags) — the corner cases of the slot logic in random order."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        who = int(rng.integers(0, 4))
        rank = who if who < 3 else int(rng.integers(0, 3))
        rnd = int(rng.integers(0, 5))
        flags = int(rng.choice([0, 0, 0, Flag.RETX, Flag.DEADLINE, Flag.PEEK]))
        if rng.random() < 0.25:
            fields = dict(msg_type=MsgType.NORM, lane_bits=32)
            values = rng.uniform(0, 50, 32).astype(np.float32)
        else:
            fields = dict(msg_type=MsgType.DATA)
            values = rng.integers(0, 16, C)
        fields.update(job_id=9, slot=int(rng.integers(0, 2)), round=rnd, rank=rank, flags=flags)
        out.append((HOSTS[who], fields, values))
    return out


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_scripts_same_frames_and_drops(nets, seed):
    script = _random_script(seed)
    out = {k: _run(net, script) for k, net in nets.items()}
    (bg, bd), (sg, sd) = out["bmv2"], out["softswitch"]
    assert sd == bd
    assert sum(len(v) for v in bg.values()) > 5 and sum(bd.values()) > 3
    for h in HOSTS:
        assert [f.hex() for f in sg[h]] == [f.hex() for f in bg[h]], h
