"""The software switch's data plane loop in C (``_fastpath.loop``, ``host/softswitch/_swloop.c``)
against its Python loop, in-process over loopback UDP: the same exact sums, every frame
counted, reply ports learned from the batches the C loop took, junk handed to the Python
pipeline and counted there; and the learned-ports table both loops share."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from control_plane.config import parse_config
from control_plane.controller import Controller, run_sync
from control_plane.embedded import EmbeddedNetwork
from host.paths import REPO
from host.softswitch.learned import LearnedPorts, key
from host.softswitch.switch import SoftSwitch
from host.thc import THCCodec
from host.thc.simulate import allreduce as simulated_allreduce
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from tests.support.transport import run_workers, worker_data

#: <asm-generic/socket.h>: send UDP without checksums (no UDP_SEGMENT then)
SO_NO_CHECK = 11


def _allreduce(net: EmbeddedNetwork, xs, base: int):
    codec = THCCodec()
    aggs = []
    for r in range(net.workers):
        a = net.address(r)
        ep = UdpEndpoint(a.switch, bind=(a.ip, 0))
        aggs.append(NetworkAggregator(ep, JobSpec(net.job_id, r, net.workers,
                                                  num_slots=net.num_slots, round_base=base,
                                                  token=net.token)))
    try:
        got = run_workers(net.workers, lambda r: aggs[r].allreduce(xs[r], codec))
        ports = {net.address(r).ip: a.ep.address[1] for r, a in enumerate(aggs)}
    finally:
        for a in aggs:
            a.ep.close()
    return got, ports, simulated_allreduce(codec, xs, round=0).average


def _worker_sockets(net: EmbeddedNetwork, timeout: float | None = None) -> list[socket.socket]:
    """One UDP socket per rank, bound to the rank's address (the switch knows it)."""
    socks = []
    for r in range(net.workers):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((net.address(r).ip, 0))
        s.settimeout(timeout)
        socks.append(s)
    return socks


def _data(net: EmbeddedNetwork, r: int, slot: int, idx: np.ndarray, rnd: int, **kw) -> bytes:
    """Rank r's DATA datagram of the job for ``slot`` in round ``rnd`` (4-bit indices ``idx``);
    ``kw`` overrides header fields (the job's token by default)."""
    from host.protocol import codec as wire
    from host.protocol.layout import COORDS_PER_PACKET, INDEX_BITS, MsgType

    kw.setdefault("token", net.token)
    return wire.encode(wire.Header(msg_type=MsgType.DATA, job_id=net.job_id, slot=slot, round=rnd,
                                   rank=r, lane_bits=INDEX_BITS,
                                   chunk_offset=slot * COORDS_PER_PACKET, **kw), idx)


@contextlib.contextmanager
def _switch_loop(monkeypatch, c_loop: str, workers: int, **kw) -> Iterator[EmbeddedNetwork]:
    """An in-process software target with ``workers`` workers running the C switch loop
    (``c_loop`` "1"; skipped where it is not built) or the Python loop ("0")."""
    monkeypatch.setenv("NETCO_SOFTSWITCH_CLOOP", c_loop)
    if c_loop == "1" and not SoftSwitch.c_loop_available():
        pytest.skip("the C loop (host/softswitch/_fastpath) is not built")
    with EmbeddedNetwork(workers, in_process=True, **kw) as net:
        assert net.switch.c_loop == (c_loop == "1")
        yield net


@pytest.mark.parametrize("c_loop", ["1", "0"])
def test_c_loop_and_python_loop_give_the_reference_sums(c_loop, monkeypatch):
    xs = worker_data(3, 70_000, 4)
    with _switch_loop(monkeypatch, c_loop, 3, num_slots=32) as net:
        sw = net.switch
        # a foreign datagram first: the C loop hands its batch to the pipeline, which counts it
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((net.address(0).ip, 0))
            s.sendto(b"\x01", net.address(0).switch)
        got, ports, ref = _allreduce(net, xs, 9000)
        st = sw.stats()
    for g in got:
        assert torch.equal(g, ref)
    for ip, port in ports.items():
        assert sw.learned[key(net.job_id, int.from_bytes(socket.inet_aton(ip), "big"))] == port
    assert st["drops"].get(1, 0) >= 1                     # SHORT, counted
    assert st["rx"] == sum(st["drops"].values()) + sum(st["outcomes"].values())
    assert st["contributions"] == st["outcomes"]["contribution"]
    assert st["tx_lost"] == 0
    if c_loop == "1":
        assert st["c_loop"]["batches"] > 0 and st["c_loop"]["handoffs"] >= 1
    else:
        assert st["c_loop"]["batches"] == 0


_runs = st.lists(st.lists(st.integers(0, 40), max_size=30), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(runs=_runs, shuffled=st.booleans())
def test_a_batch_of_several_ports_is_processed_in_arrival_order(runs, shuffled):
    """The C loop merges the ports' runs of rows (each in arrival order) instead of sorting
    the batch; the order must be the one sorting by (receive stamp, row) gives, ties to the
    earlier row: with up to 8 runs (the merge), more (a sort) and any order (a sort)."""
    _fastpath = pytest.importorskip("host.softswitch._fastpath",
                                    reason="the C data path (host/softswitch/_fastpath) is not built")
    stamps = np.concatenate([np.sort(np.array(r, dtype=np.int64)) for r in runs])
    if shuffled:
        stamps = np.random.default_rng(len(stamps)).permutation(stamps)
    want = np.argsort(stamps, kind="stable")
    got = _fastpath.arrival_order(stamps)
    if got is None:
        assert (want == np.arange(len(stamps))).all()
    else:
        assert got == want.tolist()


def test_learned_ports_table():
    t = LearnedPorts(3)
    t[10] = 1000
    t[11] = 1001
    t[10] = 2000
    assert len(t) == 2 and t[10] == 2000 and t.get(11) == 1001 and t.get(12, 7) == 7
    assert 11 in t and 12 not in t and sorted(t.items()) == [(10, 2000), (11, 1001)]
    t[12] = 1
    t[13] = 2   # a fourth address does not fit: the guard empties the table
    assert len(t) == 0 and t.get(10) is None
    with pytest.raises(KeyError):
        t[10]


def test_a_batch_with_junk_leaves_only_the_junk_to_python(monkeypatch):
    """Issue 16 (chaos, fuzz from member addresses): one junk datagram in a batch used to send
    the whole batch to the Python pipeline (fuzz every 2 ms made all-reduces 3.7x slower); the
    C loop now sets aside the frames the reference drops before any state (cut short, another
    version, another token, an unknown job), takes the rest, and hands Python only those."""
    from host.protocol import codec as wire
    from host.protocol.layout import COORDS_PER_PACKET, THC_VERSION, DropReason, MsgType

    rng = np.random.default_rng(3)
    with _switch_loop(monkeypatch, "1", 3, num_slots=32) as net:
        sw = net.switch
        socks = _worker_sockets(net)

        idx = rng.integers(0, 16, size=COORDS_PER_PACKET)
        junk = [b"\x01",                                                    # SHORT
                _data(net, 0, 1, idx, 8, version=THC_VERSION + 1),          # BAD_VERSION
                _data(net, 0, 2, idx, 8, token=net.token ^ 0x5A5A),         # BAD_SENDER
                wire.encode(wire.Header(msg_type=MsgType.DATA, job_id=net.job_id + 7, slot=0,
                                        round=8, token=net.token), idx)]    # UNKNOWN_JOB
        sent_junk = good = 0
        try:
            for slot in range(32):
                for r in range(3):
                    socks[r].sendto(_data(net, r, slot, idx, 8), net.address(r).switch)
                    good += 1
                    if (slot * 3 + r) % 3 == 1:
                        socks[r].sendto(junk[sent_junk % len(junk)], net.address(r).switch)
                        sent_junk += 1
            deadline = time.monotonic() + 10
            while sw.stats()["rx"] < good + sent_junk and time.monotonic() < deadline:
                time.sleep(0.01)
            st = sw.stats()
        finally:
            for s in socks:
                s.close()
    assert st["rx"] == good + sent_junk
    assert st["contributions"] == good                       # every valid frame summed once
    junk_drops = sum(st["drops"].get(int(d), 0) for d in (
        DropReason.SHORT, DropReason.BAD_VERSION, DropReason.BAD_SENDER, DropReason.UNKNOWN_JOB))
    assert junk_drops == sent_junk
    assert st["c_loop"]["handoff_frames"] == sent_junk       # Python saw the junk, nothing else
    assert st["c_loop"]["split_batches"] >= 1


def test_trains_of_changing_datagram_sizes_land_whole_in_their_rows(monkeypatch):
    """The C loop splits every UDP train it receives into one row per datagram: trains of
    3-byte junk before and after a train of 60 DATA datagrams (of one size; the last junk may
    ride at the end of the DATA train, as GRO coalesces a shorter last datagram). Every
    contribution must be summed whole, so all 60 results (the same indices in every slot)
    carry the same lanes, and every piece of junk is counted. (A receive straight into the
    rows, cut at the last train's size, was tried: no CPU saved, the kernel's copy grew by
    what the split's copy lost; this test covers it and the split alike.)"""
    from host.protocol import codec as wire
    from host.protocol.layout import COORDS_PER_PACKET, THC_HEADER_BYTES, DropReason, MsgType
    from host.softswitch.netio import SOL_UDP, UDP_SEGMENT, gro_enabled_default

    if not gro_enabled_default():
        pytest.skip("kernel without UDP GSO/GRO")
    slots = 60
    idx = np.random.default_rng(8).integers(0, 16, size=COORDS_PER_PACKET)
    with _switch_loop(monkeypatch, "1", 2, num_slots=64) as net:
        sw = net.switch
        socks = _worker_sockets(net, 5)

        def train(r: int, datagrams: list[bytes]) -> None:
            socks[r].setsockopt(SOL_UDP, UDP_SEGMENT, len(datagrams[0]))
            socks[r].sendto(b"".join(datagrams), net.address(r).switch)

        try:
            for r in range(2):
                train(r, [b"\x01\x02\x03"] * 40)                       # SHORT: 40 each
                train(r, [_data(net, r, slot, idx, 4) for slot in range(slots)])
                train(r, [b"\x01\x02\x03"] * 7)                        # and back
            lanes = {r: [] for r in range(2)}
            for r in range(2):
                while len(lanes[r]) < slots:
                    try:
                        d = socks[r].recv(65536)
                    except TimeoutError:
                        raise AssertionError(str(sw.stats())) from None
                    h = wire.unpack_header(d)
                    assert h.msg_type == MsgType.RESULT and h.count == 2
                    lanes[r].append(d[THC_HEADER_BYTES:])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:    # every frame counted (summed or dropped)
                st = sw.stats()
                if st["contributions"] + sum(st["drops"].values()) >= 2 * (slots + 47):
                    break
                time.sleep(0.01)
            st = sw.stats()
        finally:
            for s in socks:
                s.close()
    assert st["contributions"] == 2 * slots
    assert st["drops"].get(int(DropReason.SHORT), 0) == 2 * 47
    assert st["gro_trains"] >= 4
    want = lanes[0][0]
    assert any(want)
    for r in range(2):
        assert all(lane == want for lane in lanes[r])


def test_where_the_route_cannot_segment_results_leave_one_datagram_at_a_time(monkeypatch):
    """A port whose sends cannot be segmented (SO_NO_CHECK: the kernel refuses UDP_SEGMENT
    with EIO, as a device without checksum offload does) gets the C loop's results one
    datagram per message, cut from the packed THC messages (several share an iovec), and
    turns GSO off: each worker gets every result once, whole, as its own datagram."""
    from host.protocol import codec as wire
    from host.protocol.layout import COORDS_PER_PACKET, MsgType
    from host.softswitch.netio import SOL_UDP, UDP_SEGMENT

    slots = 40
    idx = np.random.default_rng(9).integers(0, 16, size=COORDS_PER_PACKET)
    with _switch_loop(monkeypatch, "1", 2, num_slots=64) as net:
        sw = net.switch
        udp = [p for p in sw.ports.values() if getattr(p, "gso", None) is not None]
        if not udp:
            pytest.skip("kernel without UDP GSO/GRO")
        for p in udp:
            with socket.socket(fileno=os.dup(p.sock.fileno())) as s:
                s.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
        socks = _worker_sockets(net, 5)
        got: dict[int, list[bytes]] = {0: [], 1: []}
        try:
            # each rank's DATA as one train: the later train completes every slot in one
            # batch, so each port gets all its results at once (a multi-datagram message)
            for r in range(2):
                socks[r].setsockopt(SOL_UDP, UDP_SEGMENT, len(_data(net, r, 0, idx, 4)))
                socks[r].sendto(b"".join(_data(net, r, slot, idx, 4) for slot in range(slots)),
                                net.address(r).switch)
            for r in range(2):
                while len(got[r]) < slots:
                    got[r].append(socks[r].recv(65536))
            st = sw.stats()
        finally:
            for s in socks:
                s.close()
    size = len(got[0][0])
    for r in range(2):
        heads = [wire.unpack_header(d) for d in got[r]]
        assert all(len(d) == size for d in got[r])          # one result per datagram
        assert sorted(h.slot for h in heads) == list(range(slots))
        assert all(h.msg_type == MsgType.RESULT and h.count == 2 for h in heads)
    assert all(p.gso.disabled for p in udp)
    assert st["tx_lost"] == 0 and st["c_loop"]["batches"] > 0


@pytest.mark.parametrize("c_loop", ["1", "0"])
def test_lanes_the_controller_rewrites_mid_round_come_back_at_the_new_width(c_loop, monkeypatch):
    """The controller file's ``lane_bits`` of a running job goes from 8 to 16 and is applied
    again (a P4Runtime MODIFY of the job entry): a finished round answered again to a
    retransmission and a round that was still filling both come back in 16-bit lanes with
    the exact sums (``Pipeline.take_cfg`` repacks the sums the loop kept at 8 bits)."""
    from host.protocol import codec as wire
    from host.protocol.layout import COORDS_PER_PACKET, Flag

    rng = np.random.default_rng(11)
    idx = {(r, s): rng.integers(0, 16, size=COORDS_PER_PACKET) for r in range(3) for s in (0, 1)}
    with _switch_loop(monkeypatch, c_loop, 3, num_slots=32, job={"lane_bits": 8}) as net:
        sw = net.switch
        socks = _worker_sockets(net, timeout=10)

        def send(r: int, slot: int, **kw) -> None:
            socks[r].sendto(_data(net, r, slot, idx[(r, slot)], 8, **kw), net.address(r).switch)

        def recv(r: int):
            return wire.decode(socks[r].recv(4096))

        try:
            for r in range(3):
                send(r, 0)
            first = [recv(r) for r in range(3)]
            for r in range(2):
                send(r, 1)
            deadline = time.monotonic() + 10
            while sw.stats()["contributions"] < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
            jn = int(sw.pipeline.cfg.job_map[net.job_id])
            table = sw.pipeline.cfg.lut[jn, np.arange(16) << 4, 0].astype(np.int64)
            raw = net.config_dict()
            raw["jobs"][0]["lane_bits"] = 16
            # a second controller takes over (a higher election id) and modifies the job entry
            ctl = Controller(parse_config(raw, base_dir=REPO), tokens=net.controller.tokens,
                             election_id=net.controller.election_id + 1)
            assert all(res.ok for res in run_sync(ctl.apply()))
            send(0, 0, flags=int(Flag.RETX))
            send(2, 1)
            got = {(r, m.header.slot): m for r in range(3)
                   for m in ([recv(r), recv(r)] if r == 0 else [recv(r)])}
        finally:
            for s in socks:
                s.close()
    want = {s: sum(table[idx[(r, s)]] for r in range(3)) for s in (0, 1)}
    assert all(m.header.lane_bits == 8 and np.array_equal(m.values, want[0]) for m in first)
    assert set(got) == {(0, 0), (0, 1), (1, 1), (2, 1)}
    for (_, s), m in got.items():
        assert m.header.lane_bits == 16
        assert np.array_equal(m.values, want[s])
