"""A job's ``worker_port``: the switch binds each member to the UDP port it sends from too
(issue 33, "the sender binding includes the port"), through the paths an operator and an ML
engineer take: ``netco controller apply``, ``netco controller job``, ``netco.attach``'s
``connect``, ``netco controller status``.

A process on a member's address with the job's token but another UDP port (a neighbour on
the member's host that read the token, or a member's second socket gone astray) sends
``START`` contributions 2^30 rounds ahead into every slot copy, the attack of issue 33 (1)
that stalled every rank: it is dropped as ``BAD_SENDER`` and the job stays exact. Without
``worker_port`` the old behaviour is kept (any port) and the same flood is obeyed: the control
case, so that the test shows the binding is what holds."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest
import torch

from control_plane.cli.main import main as netco_main
from host.ddp.attach import AttachError, connect
from host.protocol import layout as lay
from host.softswitch.launch import free_udp_port
from host.thc import THCCodec
from host.thc.simulate import allreduce as simulated_allreduce
from host.transport.jobfile import load
from tests.support.switchproc import Switch, job_config
from tests.support.transport import far_starts, worker_data

SLOTS = 8


@pytest.fixture
def switch(tmp_path: Path, request):
    loop = getattr(request, "param", "--c-loop")     # the switch's C loop, or its Python loop
    sw = Switch(tmp_path, {1: free_udp_port(), 2: free_udp_port()}, extra=[loop])
    sw.start()
    try:
        yield sw
    finally:
        sw.stop()


def _job_file(tmp_path: Path, sw: Switch, capsys, **job) -> Path:
    path = job_config(tmp_path / "net.yaml", sw, members=2, job={"num_slots": SLOTS, **job})
    assert netco_main(["controller", "apply", str(path)]) == 0
    out = tmp_path / "demo.job"
    assert netco_main(["controller", "job", str(path), "demo", "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def _drops(path: Path, capsys) -> dict[str, int]:
    assert netco_main(["controller", "status", str(path), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    return st["switches"][0].get("counters", {}).get("ingress.drops", {})


def _allreduce_twice_with_a_flood_between(jf, give_up: float) -> tuple[list, int]:
    """Both ranks all-reduce, then rank 0's address floods from another port, then they
    all-reduce again; (the second all-reduce's results or exceptions, datagrams sent)."""
    aggs = [connect(jf, r, give_up=give_up) for r in range(2)]
    codec = THCCodec()
    xs = worker_data(2, SLOTS * 256, 3)
    out: list = [None, None]

    def run(r: int) -> None:
        try:
            out[r] = aggs[r].allreduce(xs[r], codec)
        except Exception as exc:                 # reported: what the test asserts on
            out[r] = exc

    def both() -> None:
        ts = [threading.Thread(target=run, args=(r,)) for r in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(4 * give_up + 30)

    try:
        both()
        assert all(isinstance(o, torch.Tensor) for o in out), out
        m0 = jf.member(0)
        flood = far_starts(jf.job_id, jf.token, jf.num_slots,
                           int(aggs[0].window.next_round["data"].min()))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((m0.ip, 0))                   # member 0's address, another UDP port
            for d in flood:
                s.sendto(d, tuple(m0.switch_udp))
        both()
    finally:
        for a in aggs:
            a.close(finish=False)
    ref = simulated_allreduce(codec, xs, round=1).average
    return [o if not isinstance(o, torch.Tensor) else torch.equal(o, ref) for o in out], len(flood)


@pytest.mark.parametrize("switch", ["--c-loop", "--no-c-loop"], indirect=True)
def test_a_member_bound_to_its_port_is_not_obeyed_from_another(switch: Switch, tmp_path: Path,
                                                               capsys) -> None:
    wport = free_udp_port()
    path = tmp_path / "net.yaml"
    jf = load(_job_file(tmp_path, switch, capsys, worker_port=wport))
    assert jf.worker_port == wport
    agg = connect(jf, 0)
    try:
        assert agg.ep.address == (jf.member(0).ip, wport)       # attach binds the job's port
    finally:
        agg.close(finish=False)
    before = _drops(path, capsys).get(str(int(lay.DropReason.BAD_SENDER)), 0)
    got, sent = _allreduce_twice_with_a_flood_between(jf, give_up=5.0)
    assert got == [True, True]                                  # exact, nobody stalled
    after = _drops(path, capsys).get(str(int(lay.DropReason.BAD_SENDER)), 0)
    assert after - before >= sent                               # every spoofed START dropped


def test_without_a_worker_port_any_port_of_the_member_is_obeyed(switch: Switch, tmp_path: Path,
                                                                capsys) -> None:
    # the control case: the same flood, the job naming no port (members on ephemeral ports)
    jf = load(_job_file(tmp_path, switch, capsys))
    assert jf.worker_port == 0
    got, _ = _allreduce_twice_with_a_flood_between(jf, give_up=2.0)
    assert got != [True, True]          # the spoofed STARTs reset the copies: ranks gave up


def test_a_worker_port_in_use_is_one_line(switch: Switch, tmp_path: Path, capsys) -> None:
    wport = free_udp_port()
    jf = load(_job_file(tmp_path, switch, capsys, worker_port=wport))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((jf.member(1).ip, wport))            # another process holds rank 1's port
        with pytest.raises(AttachError) as exc:
            connect(jf, 1)
    msg = str(exc.value)
    assert "\n" not in msg
    assert f"UDP port {wport} of {jf.member(1).ip} (the job's worker_port) is in use" in msg
