"""Packet tests of THC aggregation on one switch (PTF style: frames in, frames out).

Runs against every target in ``tests/p4/conftest.py`` (BMv2, the software target). Each test installs its own
job (own job id, counter index and slot range), so tests share one started switch.
"""

from __future__ import annotations

import numpy as np
import pytest

from host.protocol import codec
from host.protocol import layout as lay
from host.protocol.layout import DropReason, Flag, MsgType
from tests.support.aggnet import INTRUDER, WORKERS, SwitchJob
from tests.support.frames import collect, thc_frame, thc_only, wait_count
from tests.support.jobs import SWITCH, assert_exact_results, expected_sums, new_job, random_indices
from tests.support.token import TOKEN

#: THC default table, b = 4, g = 30 (docs/protocol.md; THC paper defaults)
C = lay.COORDS_PER_PACKET


def data(net, job: SwitchJob, host: str, rank: int, slot: int, rnd: int, idx: np.ndarray,
         flags: int = 0, job_id: int | None = None, chunk_offset: int = 0) -> bytes:
    h = codec.Header(msg_type=MsgType.DATA, job_id=job.job_id if job_id is None else job_id,
                     slot=slot, round=rnd, rank=rank, flags=flags, chunk_offset=chunk_offset,
                     token=job.token)
    return thc_frame(net.hosts[host], job.self_ip, h, idx)


def drops_delta(before: dict[int, int], after: dict[int, int]) -> dict[DropReason, int]:
    return {DropReason(k): after.get(k, 0) - before.get(k, 0)
            for k in after if after.get(k, 0) != before.get(k, 0)}


@pytest.mark.parametrize(("n", "lane"), [(2, 32), (4, 16), (8, 8)])
def test_one_job_sums_exactly(single_switch, n, lane):
    net = single_switch
    hosts = WORKERS[:n]
    job = new_job(net, hosts, lane_bits=lane)
    if lane > net.max_data_lane_bits:
        before = net.drop_counts(SWITCH)
        for rank, h in enumerate(hosts):
            net.send(h, data(net, job, h, rank, slot=1, rnd=0, idx=np.ones(C, dtype=int)))
        assert thc_only(net.recv(hosts[0], count=1, timeout=0.5)) == []
        assert drops_delta(before, net.drop_counts(SWITCH)) == {DropReason.LANE_UNSUPPORTED: n}
        return
    rng = np.random.default_rng(n)
    for rnd in range(3):  # both copies, and round 2 reuses copy 0 (old sums must not leak)
        idxs = random_indices(rng, hosts)
        for rank, h in enumerate(hosts):
            net.send(h, data(net, job, h, rank, slot=1, rnd=rnd, idx=idxs[rank],
                             chunk_offset=4096 * rnd))
        got = collect(net, hosts)
        want = expected_sums(idxs)
        for h in hosts:
            assert len(got[h]) == 1, f"round {rnd}: {h} got {len(got[h])} results"
            r = got[h][0]
            hd = r.msg.header
            assert r.msg.msg_type is MsgType.RESULT
            assert (hd.round, hd.slot, hd.slot_set, hd.lane_bits) == (rnd, 1, rnd & 1, lane)
            assert hd.count == n and hd.bitmap == (1 << n) - 1
            assert hd.chunk_offset == 4096 * rnd and hd.elem_count == C
            assert r.dst_ip == net.hosts[h].ip and r.src_ip == job.self_ip
            np.testing.assert_array_equal(r.msg.values, want)


def test_partial_packet_elem_count_echoed(single_switch):
    net = single_switch
    hosts = WORKERS[:2]
    job = new_job(net, hosts)
    idxs = [np.full(10, 15), np.full(10, 1)]
    for rank, h in enumerate(hosts):
        net.send(h, data(net, job, h, rank, 0, 0, idxs[rank]))
    got = collect(net, hosts)
    r = got["w0"][0]
    assert r.msg.header.elem_count == 10
    np.testing.assert_array_equal(r.msg.values, np.full(10, 33))


def test_duplicate_contribution_not_double_counted(single_switch):
    net = single_switch
    hosts = WORKERS[:3]
    job = new_job(net, hosts)
    idxs = random_indices(np.random.default_rng(7), hosts)
    before = net.drop_counts(SWITCH)
    net.send("w0", data(net, job, "w0", 0, 0, 0, idxs[0]))
    net.send("w0", data(net, job, "w0", 0, 0, 0, idxs[0], flags=Flag.RETX))
    net.send("w1", data(net, job, "w1", 1, 0, 0, idxs[1]))
    assert thc_only(net.recv("w0", count=1, timeout=0.5)) == [], "no result before n arrive"
    net.send("w2", data(net, job, "w2", 2, 0, 0, idxs[2]))
    got = collect(net, hosts)
    for h in hosts:
        assert len(got[h]) == 1
        assert got[h][0].msg.header.count == 3
        np.testing.assert_array_equal(got[h][0].msg.values, expected_sums(idxs))
    assert drops_delta(before, net.drop_counts(SWITCH)) == {DropReason.DUPLICATE: 1}


def test_contribution_result_and_resent_counters(single_switch):
    net = single_switch
    hosts = WORKERS[:2]
    job = new_job(net, hosts)
    names = ("ingress.thc_slot.contributions", "ingress.thc_output.results",
             "ingress.thc_output.resent")
    before = [net.counter(SWITCH, n).get(job.index, 0) for n in names]
    for rnd in range(2):
        for rank, h in enumerate(hosts):
            net.send(h, data(net, job, h, rank, 0, rnd, np.ones(C, dtype=int)))
        collect(net, hosts)
    net.send("w0", data(net, job, "w0", 0, 0, 1, np.ones(C, dtype=int), flags=Flag.RETX))
    assert len(collect(net, ["w0"])["w0"]) == 1
    after = [net.counter(SWITCH, n).get(job.index, 0) for n in names]
    assert [a - b for a, b in zip(after, before, strict=True)] == [4, 2, 1]


def test_workers_cannot_forge_results_or_partials(single_switch):
    net = single_switch
    hosts = WORKERS[:2]
    job = new_job(net, hosts)
    before = net.drop_counts(SWITCH)
    for mt in (MsgType.RESULT, MsgType.PARTIAL):
        hd = codec.Header(token=TOKEN, msg_type=mt, job_id=job.job_id, slot=0, round=0, rank=0,
                          lane_bits=job.lane_bits, count=2, bitmap=3)
        net.send("w0", thc_frame(net.hosts["w0"], job.self_ip, hd, np.full(C, 200)))
    hd = codec.Header(token=TOKEN, msg_type=MsgType.RESULT, job_id=job.job_id, slot=0, round=0, rank=0,
                      lane_bits=16)  # lanes of another width than the job's
    net.send("w0", thc_frame(net.hosts["w0"], job.self_ip, hd, np.full(C, 200)))
    idxs = [np.full(C, 3), np.full(C, 4)]
    for rank, h in enumerate(hosts):
        net.send(h, data(net, job, h, rank, 0, 0, idxs[rank]))
    got = collect(net, hosts)
    assert_exact_results(got, hosts, idxs)
    assert drops_delta(before, net.drop_counts(SWITCH)) == {
        DropReason.BAD_SENDER: 2, DropReason.MALFORMED: 1}


def test_unregistered_sender_and_wrong_job_dropped(single_switch):
    net = single_switch
    job_a = new_job(net, WORKERS[:2])
    job_b = new_job(net, WORKERS[2:4])
    rng = np.random.default_rng(11)
    junk = np.full(C, 15)
    idxs = [rng.integers(0, 16, C) for _ in range(2)]
    before = net.drop_counts(SWITCH)
    # x claims to be rank 0 of job A; w2 (a job B worker) sends into job A as rank 1;
    # w0 uses its own rank on job B's id; and a job id nobody installed.
    net.send(INTRUDER, data(net, job_a, INTRUDER, 0, 0, 0, junk))
    net.send("w2", data(net, job_a, "w2", 1, 0, 0, junk))
    net.send("w0", data(net, job_a, "w0", 0, 0, 0, junk, job_id=job_b.job_id))
    net.send("w0", data(net, job_a, "w0", 0, 0, 0, junk, job_id=4000))
    for rank, h in enumerate(WORKERS[:2]):
        net.send(h, data(net, job_a, h, rank, 0, 0, idxs[rank]))
    got = collect(net, WORKERS[:2])
    for h in WORKERS[:2]:
        assert len(got[h]) == 1
        assert got[h][0].msg.header.count == 2 and got[h][0].msg.header.bitmap == 0b11
        np.testing.assert_array_equal(got[h][0].msg.values, expected_sums(idxs))
    assert drops_delta(before, net.drop_counts(SWITCH)) == {
        DropReason.BAD_SENDER: 3, DropReason.UNKNOWN_JOB: 1}
    assert thc_only(net.recv(INTRUDER, count=1, timeout=0.2)) == []


def test_short_and_malformed_packets_dropped_without_side_effects(single_switch):
    net = single_switch
    hosts = WORKERS[:2]
    job = new_job(net, hosts)
    idxs = [np.arange(C) % 16, (np.arange(C) * 7) % 16]
    full = data(net, job, "w0", 0, 0, 0, idxs[0])
    before = net.drop_counts(SWITCH)
    net.send("w0", full[:-1])                      # payload one byte short
    net.send("w0", full[: 14 + 20 + 8 + 10])       # THC header cut
    bad_version = bytearray(full)
    bad_version[42] = 9
    net.send("w0", bytes(bad_version))
    bad_type = bytearray(full)
    bad_type[43] = 77
    net.send("w0", bytes(bad_type))
    net.send("w0", data(net, job, "w0", 0, slot=job.num_slots, rnd=0, idx=idxs[0]))  # slot
    wrong_set = bytearray(full)
    wrong_set[42 + 7] = 1                           # set bit != round parity
    net.send("w0", bytes(wrong_set))
    # After all that, w0's real contribution must still be new (no state was touched).
    for rank, h in enumerate(hosts):
        net.send(h, data(net, job, h, rank, 0, 0, idxs[rank]))
    got = collect(net, hosts)
    assert_exact_results(got, hosts, idxs, count=2)
    assert drops_delta(before, net.drop_counts(SWITCH)) == {
        DropReason.SHORT: 2, DropReason.BAD_VERSION: 1, DropReason.BAD_TYPE: 1,
        DropReason.BAD_SLOT: 1, DropReason.MALFORMED: 1}


def test_norm_maximum(single_switch):
    net = single_switch
    hosts = WORKERS[:3]
    job = new_job(net, hosts)
    rng = np.random.default_rng(3)
    norms = [rng.uniform(0, 1e3, lay.NORMS_PER_PACKET).astype(np.float32) for _ in hosts]
    norms[1][0] = 3.0e38  # near the float32 maximum
    norms[2][1] = 1e-38   # tiny values still order as bits
    for rank, h in enumerate(hosts):
        hd = codec.Header(token=TOKEN, msg_type=MsgType.NORM, job_id=job.job_id, slot=0, round=0,
                          rank=rank, lane_bits=32)
        net.send(h, thc_frame(net.hosts[h], job.self_ip, hd, norms[rank]))
    got = collect(net, hosts)
    for h in hosts:
        assert len(got[h]) == 1
        r = got[h][0]
        assert r.msg.msg_type is MsgType.NORM_RESULT and r.msg.header.count == 3
        np.testing.assert_array_equal(r.msg.values, np.max(norms, axis=0))


def test_result_resent_on_retransmission(single_switch):
    net = single_switch
    hosts = WORKERS[:3]
    job = new_job(net, hosts)
    rng = np.random.default_rng(5)
    r0 = random_indices(rng, hosts)
    for rank, h in enumerate(hosts):
        net.send(h, data(net, job, h, rank, 2, 0, r0[rank]))
    collect(net, hosts)
    # Round 1 starts in the other copy; w1 then retransmits round 0 (it "lost" the result).
    r1 = random_indices(rng, hosts)
    net.send("w0", data(net, job, "w0", 0, 2, 1, r1[0]))
    net.send("w1", data(net, job, "w1", 1, 2, 0, r0[1], flags=Flag.RETX))
    got = collect(net, hosts, timeout=1.0)
    assert got["w0"] == [] and got["w2"] == [], "a re-sent result goes to the requester only"
    assert len(got["w1"]) == 1
    r = got["w1"][0]
    assert r.msg.header.flags & Flag.RESENT and r.msg.header.round == 0
    assert r.msg.header.rank == 1 and r.dst_ip == net.hosts["w1"].ip
    np.testing.assert_array_equal(r.msg.values, expected_sums(r0))
    # Round 1 completes undisturbed; then round 0's copy is reused by round 2, so a
    # retransmission of round 0 is stale.
    for rank in (1, 2):
        net.send(hosts[rank], data(net, job, hosts[rank], rank, 2, 1, r1[rank]))
    got = collect(net, hosts)
    for h in hosts:
        assert len(got[h]) == 1
        np.testing.assert_array_equal(got[h][0].msg.values, expected_sums(r1))
    net.send("w0", data(net, job, "w0", 0, 2, 2, r1[0]))
    assert wait_count(net, net.hosts["w1"], job.self_ip, job.job_id, 1, 2, 2, want=1) == 1
    before = net.drop_counts(SWITCH)
    net.send("w1", data(net, job, "w1", 1, 2, 0, r0[1], flags=Flag.RETX))
    assert thc_only(net.recv("w1", count=1, timeout=0.5)) == []
    assert drops_delta(before, net.drop_counts(SWITCH)) == {DropReason.STALE: 1}


def test_two_jobs_at_once_stay_isolated(single_switch):
    net = single_switch
    ha, hb = WORKERS[:2], WORKERS[2:5]
    ja, jb = new_job(net, ha), new_job(net, hb, lane_bits=16)
    rng = np.random.default_rng(9)
    ia = [rng.integers(0, 16, C) for _ in ha]
    ib = [rng.integers(0, 16, C) for _ in hb]
    sends = [(ja, h, r, ia[r]) for r, h in enumerate(ha)] + [(jb, h, r, ib[r])
                                                            for r, h in enumerate(hb)]
    order = [sends[i] for i in (0, 2, 3, 1, 4)]  # interleave the two jobs, same slot/round
    for job, h, r, idx in order:
        net.send(h, data(net, job, h, r, 0, 0, idx))
    got = collect(net, ha + hb)
    for h in ha:
        assert len(got[h]) == 1 and got[h][0].msg.header.job_id == ja.job_id
        assert got[h][0].msg.header.count == 2
        np.testing.assert_array_equal(got[h][0].msg.values, expected_sums(ia))
    for h in hb:
        assert len(got[h]) == 1 and got[h][0].msg.header.job_id == jb.job_id
        assert got[h][0].msg.header.count == 3 and got[h][0].msg.header.lane_bits == 16
        np.testing.assert_array_equal(got[h][0].msg.values, expected_sums(ib))


def test_ordinary_ipv4_routed_and_unrouted_dropped(single_switch):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    net = single_switch
    dst = net.hosts["w7"]
    net.add_route(SWITCH, "192.168.7.0/24", dst.port, "02:00:00:00:ff:fe", dst.mac)
    net.flush("w7")
    pkt = Ether(src=net.hosts["w6"].mac) / IP(src="10.9.9.9", dst="192.168.7.5", ttl=9) / \
        UDP(sport=1, dport=2) / b"hello"
    before = net.drop_counts(SWITCH)
    net.send("w6", bytes(pkt))
    got = [Ether(f) for f in net.recv("w7", count=1, timeout=2.0)]
    assert len(got) == 1
    assert got[0][Ether].dst == dst.mac and got[0][IP].ttl == 8
    assert bytes(got[0][UDP].payload) == b"hello"
    net.send("w6", bytes(Ether() / IP(dst="172.16.0.1") / UDP() / b"x"))
    net.send("w6", bytes(Ether(src=net.hosts["w6"].mac) / IP(dst="192.168.7.5", ttl=1)
                         / UDP() / b"x"))
    net.send("w6", bytes(Ether(type=0x86DD) / (b"\x60" + bytes(50))))
    assert net.recv("w7", count=1, timeout=0.3) == []
    assert drops_delta(before, net.drop_counts(SWITCH)) == {
        DropReason.NO_ROUTE: 1, DropReason.TTL_EXPIRED: 1, DropReason.NOT_IPV4: 1}


def test_peek_names_contributors_without_changing_state(single_switch):
    net = single_switch
    hosts = WORKERS[:3]
    job = new_job(net, hosts)
    idxs = [np.full(C, i + 1) for i in range(3)]
    net.send("w0", data(net, job, "w0", 0, 0, 0, idxs[0]))
    net.send("w2", data(net, job, "w2", 2, 0, 0, idxs[2]))
    # w1 asks until both are in (ports are not processed in a fixed order); every request is
    # a PEEK carrying w1's data, which must not be counted.
    assert wait_count(net, net.hosts["w1"], job.self_ip, job.job_id, 1, 0, 0, want=2) == 2
    net.send("w1", data(net, job, "w1", 1, 0, 0, idxs[1], flags=Flag.RETX | Flag.PEEK))
    got = collect(net, hosts, timeout=1.0)
    assert got["w0"] == [] and got["w2"] == []
    assert len(got["w1"]) == 1
    hd = got["w1"][0].msg.header
    assert hd.flags & Flag.PEEK and hd.count == 2 and hd.bitmap == 0b101 and hd.round == 0
    # The peek added nothing: w1's real contribution completes the slot with all three.
    net.send("w1", data(net, job, "w1", 1, 0, 0, idxs[1]))
    got = collect(net, hosts)
    for h in hosts:
        assert len(got[h]) == 1 and got[h][0].msg.header.count == 3
        np.testing.assert_array_equal(got[h][0].msg.values, expected_sums(idxs))


def test_deadline_releases_partial_sum_and_late_sender_gets_it(single_switch):
    net = single_switch
    hosts = WORKERS[:3]
    job = new_job(net, hosts)
    idxs = random_indices(np.random.default_rng(21), hosts)
    net.send("w0", data(net, job, "w0", 0, 1, 0, idxs[0]))
    net.send("w1", data(net, job, "w1", 1, 1, 0, idxs[1]))
    assert wait_count(net, net.hosts["w0"], job.self_ip, job.job_id, 0, 1, 0, want=2) == 2
    net.send("w0", data(net, job, "w0", 0, 1, 0, idxs[0], flags=Flag.RETX | Flag.DEADLINE))
    got = collect(net, hosts)
    part = expected_sums(idxs[:2])
    for h in hosts:
        assert len(got[h]) == 1, h
        hd = got[h][0].msg.header
        assert hd.count == 2 and hd.bitmap == 0b011
        np.testing.assert_array_equal(got[h][0].msg.values, part)
    # w2 arrives late: it is not added, it gets the released result.
    net.send("w2", data(net, job, "w2", 2, 1, 0, idxs[2]))
    got = collect(net, hosts, timeout=1.0)
    assert got["w0"] == [] and got["w1"] == [] and len(got["w2"]) == 1
    hd = got["w2"][0].msg.header
    assert hd.flags & Flag.RESENT and hd.count == 2
    np.testing.assert_array_equal(got["w2"][0].msg.values, part)
