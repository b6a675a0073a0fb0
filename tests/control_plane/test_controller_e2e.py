"""End to end: entries derived by the controller make the software target aggregate correctly.

Software targets (``python -m host.softswitch``) on loopback, no root: hosts are UDP sockets
bound to their own 127.0.0.x address (the target's ``udp`` ports take the sender's IPv4
address from the datagram, so the controller's sender entries must name exactly those),
switch-to-switch links are ``tunnel`` ports carrying whole frames. Workers send THC DATA;
every worker must receive the exact sum of the table values (THC step 9) with the right
count and bitmap — so job, sender, table, member, multicast and parent/child entries all have
to be right.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from control_plane.config import parse_config
from control_plane.controller import Controller
from host.protocol import codec
from host.protocol import layout as lay
from host.softswitch.launch import (
    free_tcp_port,
    free_udp_port,
    spawn_process,
    stop_process,
    switch_command,
    wait_listening,
)


class Switches:
    """Software targets started here and stopped by PID."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: dict[str, subprocess.Popen] = {}
        self.grpc: dict[str, int] = {}

    def start(self, name: str, ports: list[str]) -> str:
        """Start switch ``name`` (``--port`` values ``ports``) without waiting; its address."""
        self.grpc[name] = free_tcp_port()
        self.procs[name] = spawn_process(switch_command(ports, self.grpc[name]), self.log(name))
        return f"127.0.0.1:{self.grpc[name]}"

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def wait(self) -> None:
        for name, port in self.grpc.items():
            wait_listening(self.procs[name], port, self.log(name), what=name)

    def stop(self) -> None:
        for p in self.procs.values():
            stop_process(p)


@pytest.fixture
def switches(tmp_path: Path):
    sw = Switches(tmp_path)
    try:
        yield sw
    finally:
        sw.stop()


def host_socket(ip: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, 0))
    s.settimeout(3.0)
    return s


def aggregate_once(cfg, job_id: int, socks: dict, switch_port: dict, seed: int = 0,
                   token: int = 0) -> dict:
    """Every member sends one DATA for slot 0 round 0 with the job's ``token``; returns host ->
    decoded result."""
    job = next(j for j in cfg.jobs if j.id == job_id)
    rng = np.random.default_rng(seed)
    idx = {h: rng.integers(0, 16, lay.COORDS_PER_PACKET) for h in job.members}
    for rank, h in enumerate(job.members):
        hd = codec.Header(msg_type=lay.MsgType.DATA, job_id=job_id, slot=0, round=0, rank=rank,
                          token=token)
        socks[h].sendto(codec.encode(hd, idx[h]), ("127.0.0.1", switch_port[h]))
    table = np.array(job.thc.table)
    want = sum(table[idx[h]] for h in job.members)
    out = {}
    for h in job.members:
        msg = codec.decode(socks[h].recv(4096))
        out[h] = (msg, want)
    return out


def test_single_switch_job_aggregates(switches: Switches) -> None:
    port = {"h1": free_udp_port(), "h2": free_udp_port(), "h3": free_udp_port()}
    addr = switches.start("s1", [f"{i}=udp:127.0.0.1:{port[h]}" for i, h in enumerate(port, start=1)])
    switches.wait()
    ips = {"h1": "127.0.0.11", "h2": "127.0.0.12", "h3": "127.0.0.13"}
    cfg = parse_config({
        "switches": [{"name": "s1", "address": addr, "addr": "127.0.0.254", "target": "softswitch"}],
        "hosts": [{"name": h, "mac": f"02:00:00:00:00:0{i}", "ip": ips[h], "attach": f"s1:{i}"}
                  for i, h in enumerate(ips, start=1)],
        "jobs": [{"name": "j", "id": 5, "members": ["h1", "h2", "h3"]},
                 {"name": "k", "id": 6, "members": ["h3", "h1"]}],
    })
    ctl = Controller(cfg)
    assert all(r.ok for r in asyncio.run(ctl.apply()))
    socks = {h: host_socket(ip) for h, ip in ips.items()}
    try:
        for job_id, n, bitmap in ((5, 3, 0b111), (6, 2, 0b11)):
            got = aggregate_once(cfg, job_id, socks, port, seed=job_id, token=ctl.tokens[job_id])
            for _h, (msg, want) in got.items():
                assert msg.header.msg_type == lay.MsgType.RESULT and msg.header.job_id == job_id
                assert (msg.header.count, msg.header.bitmap, msg.header.lane_bits) == (n, bitmap, 8)
                np.testing.assert_array_equal(msg.values, want)
    finally:
        for s in socks.values():
            s.close()
    (st,) = asyncio.run(ctl.status())
    assert not any(st.counters["ingress.drops"].values())
    # job j has index 0, job k index 1: one result each
    assert [st.counters["ingress.thc_output.results"][i] for i in (0, 1)] == [1, 1]
    assert [st.counters["ingress.thc_slot.contributions"][i] for i in (0, 1)] == [3, 2]


def test_two_level_tree_aggregates(switches: Switches) -> None:
    """leaf0 (a0, a1) and leaf1 (b0, b1) under root; the tree is derived from the links."""
    hp = {h: free_udp_port() for h in ("a0", "a1", "b0", "b1")}
    t = [free_udp_port() for _ in range(4)]
    addr = {
        "leaf0": switches.start("leaf0", [f"1=udp:127.0.0.1:{hp['a0']}", f"2=udp:127.0.0.1:{hp['a1']}",
                                          f"3=tunnel:127.0.0.1:{t[0]},peer=127.0.0.1:{t[1]}"]),
        "root": switches.start("root", [f"1=tunnel:127.0.0.1:{t[1]},peer=127.0.0.1:{t[0]}",
                                        f"2=tunnel:127.0.0.1:{t[3]},peer=127.0.0.1:{t[2]}"]),
        "leaf1": switches.start("leaf1", [f"1=udp:127.0.0.1:{hp['b0']}", f"2=udp:127.0.0.1:{hp['b1']}",
                                          f"3=tunnel:127.0.0.1:{t[2]},peer=127.0.0.1:{t[3]}"]),
    }
    switches.wait()
    ips = {"a0": "127.0.0.21", "a1": "127.0.0.22", "b0": "127.0.0.31", "b1": "127.0.0.32"}
    att = {"a0": "leaf0:1", "a1": "leaf0:2", "b0": "leaf1:1", "b1": "leaf1:2"}
    cfg = parse_config({
        "switches": [{"name": n, "address": a, "addr": f"10.0.255.{i}", "target": "softswitch"}
                     for i, (n, a) in enumerate(addr.items(), start=1)],
        "hosts": [{"name": h, "mac": f"02:00:00:00:00:0{i}", "ip": ips[h], "attach": att[h]}
                  for i, h in enumerate(ips, start=1)],
        "links": [{"a": "leaf0:3", "b": "root:1"}, {"a": "leaf1:3", "b": "root:2"}],
        "jobs": [{"name": "j", "id": 7, "members": list(ips), "thc": {"g": 100}}],
    })
    assert {n.switch: n.parent for n in cfg.jobs[0].tree} == {"root": None, "leaf0": "root", "leaf1": "root"}
    ctl = Controller(cfg)
    assert all(r.ok for r in asyncio.run(ctl.apply()))
    socks = {h: host_socket(ip) for h, ip in ips.items()}
    try:
        got = aggregate_once(cfg, 7, socks, hp, token=ctl.tokens[7])
    finally:
        for s in socks.values():
            s.close()
    for _h, (msg, want) in got.items():
        assert msg.header.msg_type == lay.MsgType.RESULT
        # n*g = 4*100 = 400 needs 16-bit lanes; the whole job's count reaches every worker
        assert (msg.header.count, msg.header.bitmap, msg.header.lane_bits) == (4, 0b1111, 16)
        np.testing.assert_array_equal(msg.values, want)
    status = {r.switch: r for r in asyncio.run(ctl.status())}
    for name, r in status.items():
        assert r.ok and r.diff.in_sync, name
        assert not any(r.counters["ingress.drops"].values()), (name, r.counters["ingress.drops"])
    # the root counts the two leaves as its contributors
    assert status["root"].counters["ingress.thc_slot.contributions"][0] == 2
