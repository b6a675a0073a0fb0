"""Issue 16 on the wire, on every target of ``tests/p4/conftest.py`` (BMv2, the software
target over UDP and AF_PACKET): the per-job token (protocol version 2), the round window that
keeps far-future rounds from stalling a slot (H2), and a member's address on another UDP port
(S3). Each test installs its own job on the module's switch."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from host.protocol import codec
from host.protocol import layout as lay
from host.protocol.layout import DropReason, Flag, MsgType
from host.softswitch.switch import SoftSwitch
from tests.support.aggnet import WORKERS, SoftswitchNetwork, SwitchJob
from tests.support.frames import SWITCH_MAC, collect, thc_frame, thc_only, wait_count
from tests.support.jobs import SWITCH, assert_exact_results, expected_sums, new_job, random_indices

C = lay.COORDS_PER_PACKET
TOKEN = 0x5EC2E7A1


def data(net, job: SwitchJob, host: str, rank: int, slot: int, rnd: int, idx: np.ndarray,
         flags: int = 0, token: int | None = None, sport: int = lay.THC_UDP_PORT) -> bytes:
    h = codec.Header(msg_type=MsgType.DATA, job_id=job.job_id, slot=slot, round=rnd, rank=rank,
                     flags=flags, token=job.token if token is None else token)
    return thc_frame(net.hosts[host], job.self_ip, h, idx, sport=sport)


def _round(net, job: SwitchJob, hosts: list[str], slot: int, rnd: int, idxs: list) -> dict:
    """Every host's DATA of ``slot`` in round ``rnd`` (``idxs`` by rank); what each received."""
    for rank, h in enumerate(hosts):
        net.send(h, data(net, job, h, rank, slot, rnd, idxs[rank]))
    return collect(net, hosts)


def _past_round_0(net, token: int, slot: int, seed: int) -> tuple[list[str], SwitchJob, np.random.Generator]:
    """A new job of w0 and w1 (``token``) whose ``slot`` has completed round 0: its hosts, the
    job and the random stream that drew round 0's indices."""
    hosts = WORKERS[:2]
    job = new_job(net, hosts, token=token)
    rng = np.random.default_rng(seed)
    _round(net, job, hosts, slot, 0, random_indices(rng, hosts))
    return hosts, job, rng


def drops_delta(before: dict[int, int], after: dict[int, int]) -> dict[DropReason, int]:
    return {DropReason(k): after.get(k, 0) - before.get(k, 0)
            for k in after if after.get(k, 0) != before.get(k, 0)}


def test_wrong_token_dropped_as_bad_sender_and_never_summed(single_switch):
    net = single_switch
    hosts = WORKERS[:2]
    job = new_job(net, hosts, token=TOKEN)
    idxs = [np.full(C, 3), np.full(C, 5)]
    before = net.drop_counts(SWITCH)
    # a member's own port and address, every field right but the token (off by one bit, 0)
    net.send("w0", data(net, job, "w0", 0, 0, 0, np.full(C, 15), token=TOKEN ^ 1))
    net.send("w1", data(net, job, "w1", 1, 0, 0, np.full(C, 15), token=0))
    got = _round(net, job, hosts, 0, 0, idxs)
    # results carry the job's token
    assert_exact_results(got, hosts, idxs, count=2, token=TOKEN)
    assert drops_delta(before, net.drop_counts(SWITCH)) == {DropReason.BAD_SENDER: 2}


def test_member_address_on_another_udp_port_without_the_token_is_dropped(single_switch):
    """S3: a datagram from a member's IPv4 address but another UDP source port (another
    process on that host) replaced the member's contribution; it does not know the token."""
    net = single_switch
    hosts = WORKERS[:2]
    job = new_job(net, hosts, token=TOKEN + 1)
    idxs = [np.full(C, 1), np.full(C, 2)]
    before = net.drop_counts(SWITCH)
    for token in (0, TOKEN):          # none, and another job's
        net.send("w0", data(net, job, "w0", 0, 1, 0, np.full(C, 15), token=token, sport=40001))
    got = _round(net, job, hosts, 1, 0, idxs)
    assert_exact_results(got, hosts, idxs, bitmap=0b11)
    assert drops_delta(before, net.drop_counts(SWITCH)) == {DropReason.BAD_SENDER: 2}


def test_member_address_on_another_udp_port_with_the_token_is_dropped_when_bound(single_switch):
    """issue 33: the sender binding names the UDP port too (the job's ``worker_port``): a
    datagram of a member's address, rank and the job's token from another UDP port (a process
    on that host that read the token) is dropped as BAD_SENDER, and a job bound to another
    port than THC's takes its members' datagrams from that port."""
    net = single_switch
    hosts = WORKERS[:2]
    job = new_job(net, hosts, token=TOKEN + 2, udp_port=lay.THC_UDP_PORT)
    idxs = [np.full(C, 6), np.full(C, 7)]
    before = net.drop_counts(SWITCH)
    net.send("w0", data(net, job, "w0", 0, 2, 0, np.full(C, 15), sport=40001))
    net.send("w1", data(net, job, "w1", 1, 2, 0, np.full(C, 15), flags=int(Flag.START),
                        sport=lay.THC_UDP_PORT + 1))
    got = _round(net, job, hosts, 2, 0, idxs)
    assert_exact_results(got, hosts, idxs, bitmap=0b11, token=TOKEN + 2)
    assert drops_delta(before, net.drop_counts(SWITCH)) == {DropReason.BAD_SENDER: 2}
    # bound to port 7777: the members' datagrams from 7777 are summed, from THC's port not
    other = new_job(net, hosts, token=TOKEN + 3, udp_port=7777)
    before = net.drop_counts(SWITCH)
    net.send("w0", data(net, other, "w0", 0, 0, 0, np.full(C, 15)))
    for rank, h in enumerate(hosts):
        net.send(h, data(net, other, h, rank, 0, 0, idxs[rank], sport=7777))
    assert_exact_results(collect(net, hosts), hosts, idxs, bitmap=0b11, token=TOKEN + 3)
    assert drops_delta(before, net.drop_counts(SWITCH)) == {DropReason.BAD_SENDER: 1}


def test_far_future_rounds_dropped_as_ahead_and_the_slot_goes_on(single_switch):
    """H2: a contribution more than ROUND_WINDOW rounds ahead of its copy (and without START)
    is dropped as AHEAD, so it cannot make the members' next rounds STALE."""
    net = single_switch
    hosts, job, rng = _past_round_0(net, TOKEN + 2, slot=2, seed=3)
    before = net.drop_counts(SWITCH)
    # same copy (even rounds), 2^16 and 2^30 rounds ahead, with the job's token
    for far in (lay.ROUND_WINDOW, 1 << 30):
        net.send("w0", data(net, job, "w0", 0, 2, far, np.full(C, 15)))
    r2 = random_indices(rng, hosts)
    got = _round(net, job, hosts, 2, 2, r2)
    assert_exact_results(got, hosts, r2, round=2)
    assert drops_delta(before, net.drop_counts(SWITCH)) == {DropReason.AHEAD: 2}


def test_a_member_lapping_the_others_is_dropped_as_ahead(single_switch):
    """Issue 33 (1): a member (its own address and port, the job's token) sends its copy's
    next round while the copy still collects the current one (the issue's case), then a round
    past the next once it is released: both dropped as AHEAD, and the others' rounds complete
    exactly. Obeyed (before), each reset the copy and the others' contributions turned
    STALE."""
    net = single_switch
    hosts, job, rng = _past_round_0(net, TOKEN + 4, slot=1, seed=6)
    before = net.drop_counts(SWITCH)
    r2 = random_indices(rng, hosts)
    net.send("w0", data(net, job, "w0", 0, 1, 2, r2[0]))
    assert wait_count(net, net.hosts["w1"], job.self_ip, job.job_id, 1, 1, 2, want=1,
                      token=job.token) == 1
    net.send("w0", data(net, job, "w0", 0, 1, 4, np.full(C, 15)))   # copy 0 still collects 2
    assert wait_count(net, net.hosts["w1"], job.self_ip, job.job_id, 1, 1, 2, want=1,
                      token=job.token) == 1
    net.send("w1", data(net, job, "w1", 1, 1, 2, r2[1]))
    assert_exact_results(collect(net, hosts), hosts, r2, round=2, count=2)
    net.send("w1", data(net, job, "w1", 1, 1, 6, np.full(C, 15)))   # released 2: 6 skips 4
    # the copy still holds round 2's result (a barrier too: the ports' order is not fixed, and
    # round 6 after w0's round 4 opened the copy would be its next round, which is taken)
    assert wait_count(net, net.hosts["w1"], job.self_ip, job.job_id, 1, 1, 2, want=2,
                      token=job.token) == 2
    r4 = random_indices(rng, hosts)
    got = _round(net, job, hosts, 1, 4, r4)
    assert_exact_results(got, hosts, r4, round=4, count=2)
    assert drops_delta(before, net.drop_counts(SWITCH)) == {DropReason.AHEAD: 2}


def test_start_opens_a_copy_however_far_ahead(single_switch):
    """A new session starts at the clock, far above the copies' rounds: its first rounds carry
    START and open the copy; the round after (no START) is within the window."""
    net = single_switch
    hosts, job, rng = _past_round_0(net, TOKEN + 3, slot=3, seed=4)
    base = 1 << 24
    before = net.drop_counts(SWITCH)
    for rnd, flags in ((base, Flag.START), (base + 2, 0)):
        idxs = random_indices(rng, hosts)
        net.send("w0", data(net, job, "w0", 0, 3, rnd, idxs[0], flags=flags))
        assert wait_count(net, net.hosts["w1"], job.self_ip, job.job_id, 1, 3, rnd, want=1,
                          token=job.token) == 1
        net.send("w1", data(net, job, "w1", 1, 3, rnd, idxs[1], flags=flags))
        got = collect(net, hosts)
        for h in hosts:
            assert len(got[h]) == 1 and got[h][0].msg.header.round == rnd
            np.testing.assert_array_equal(got[h][0].msg.values, expected_sums(idxs))
    assert drops_delta(before, net.drop_counts(SWITCH)) == {}
    assert thc_only(net.recv("w0", count=1, timeout=0.1)) == []


def _rate_limited(net) -> bool:
    """Whether the target applies the rate limit: BMv2 and the software target's C loop do;
    the Python loop (``--no-c-loop``, the reference) has none (docs/security.md)."""
    if isinstance(net, SoftswitchNetwork):
        return "--no-c-loop" not in net.switch_args and SoftSwitch.c_loop_available()
    return True


def test_a_source_failing_validation_past_the_limit_is_held(single_switch):
    """Issue 33 (4): a source (address and UDP port) that sends more than RATE_LIMIT_FRAMES
    frames failing validation within a second is held for RATE_LIMIT_HOLD_US: its next frame,
    a contribution with the job's token, is dropped as RATE_LIMITED and never summed (a right
    token guess goes unanswered); the member on its own port is not held; the trip is counted
    (``ingress.rate_limit.trips``); once the hold is over its frames are validated again.
    Without the limit (the v1model program before it) the contribution was summed as rank 0's
    and the member's own became a DUPLICATE."""
    net = single_switch
    if not _rate_limited(net):
        pytest.skip("the software target's Python loop has no rate limit (docs/security.md)")
    hosts = WORKERS[:2]
    job = new_job(net, hosts, token=TOKEN + 5)   # no worker_port: any port of w0 is rank 0's
    idxs = [np.full(C, 4), np.full(C, 9)]
    guesser = 40123
    trips = net.counter(SWITCH, "ingress.rate_limit.trips").get(0, 0)
    before = net.drop_counts(SWITCH)
    # frames of protocol version 1 (BAD_VERSION), paced at 1,500/s: BMv2 reads a burst of
    # them only partly, and parses whole DATA packets more slowly than 1,000/s on a loaded
    # machine (a source it cannot read faster than the limit is not held)
    head = codec.pack_header(codec.Header(msg_type=MsgType.DATA, job_id=job.job_id, rank=0,
                                          slot=3, round=0, token=job.token))
    w0 = net.hosts["w0"]
    junk = bytes(Ether(src=w0.mac, dst=SWITCH_MAC) / IP(src=w0.ip, dst=job.self_ip, ttl=64)
                 / UDP(sport=guesser, dport=lay.THC_UDP_PORT)
                 / (bytes([1]) + head[1:] + bytes(lay.COORDS_PER_PACKET // 2)))
    flood, rate = lay.RATE_LIMIT_FRAMES + 300, 1500
    t0 = time.monotonic()
    for i in range(flood):
        while time.monotonic() - t0 < i / rate:
            pass
        net.send("w0", junk)
    net.send("w0", data(net, job, "w0", 0, 3, 0, np.full(C, 15), sport=guesser))   # the token
    got = _round(net, job, hosts, 3, 0, idxs)
    assert_exact_results(got, hosts, idxs, bitmap=0b11, count=2, token=TOKEN + 5)
    delta = drops_delta(before, net.drop_counts(SWITCH))
    assert set(delta) == {DropReason.BAD_VERSION, DropReason.RATE_LIMITED}, delta
    assert delta[DropReason.BAD_VERSION] == lay.RATE_LIMIT_FRAMES + 1, delta
    assert net.counter(SWITCH, "ingress.rate_limit.trips").get(0, 0) == trips + 1
    time.sleep(lay.RATE_LIMIT_HOLD_US / 1e6 + 0.2)   # the hold is over: validated again
    before = net.drop_counts(SWITCH)
    net.send("w0", data(net, job, "w0", 0, 3, 2, np.full(C, 15), token=TOKEN, sport=guesser))
    r2 = [np.full(C, 1), np.full(C, 2)]
    assert_exact_results(_round(net, job, hosts, 3, 2, r2), hosts, r2, round=2)
    assert drops_delta(before, net.drop_counts(SWITCH)) == {DropReason.BAD_SENDER: 1}
