"""The C slot loop (``host/transport/_slotloop.c``) against the Python loop (``slots.py``).

Both paths of :meth:`SlotWindow.exchange_into` must send the same packets, accept the same
results and end with the same statistics and estimator state: checked against a scripted
switch (drops, duplicates, stale answers, partial counts), then through the real software
target — bit-exact sums, ``allreduce`` identical to the in-process protocol, and under loss,
duplication, reordering and a dead worker via :class:`FaultyRelay` (the C loop drives its
socket itself, so the faults sit in a relay between it and the switch).
"""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from control_plane.embedded import EmbeddedNetwork
from host.protocol import codec as wire
from host.protocol.layout import COORDS_PER_PACKET, THC_HEADER, MsgType
from host.thc import THCCodec
from host.transport import slots as slots_mod
from host.transport.faults import FaultyRelay
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import RawEndpoint, UdpEndpoint
from host.transport.slots import SlotConfig, SlotTimeoutError, SlotWindow
from tests.support.scripted import ScriptedSwitch, lane_value, scripted_exchange
from tests.support.transport import (
    FAULT_IDS,
    FAULTS,
    allreduce_under_faults,
    assert_bit_identical,
    assert_exact_sums,
    assert_faults_in_effect,
    encode_all,
    packed_sums,
    run_and_close,
    run_workers,
    sums_with_a_dying_worker,
    worker_data,
)

pytestmark = pytest.mark.skipif(slots_mod._slotloop is None,
                                reason="the C slot loop (host/transport/_slotloop) is not built")

_I = {f.name: i for i, f in enumerate(THC_HEADER)}
H = wire.HEADER_STRUCT


def test_c_loop_sends_and_accepts_exactly_what_the_python_loop_does():
    runs = [scripted_exchange(native) for native in (True, False)]
    (wc, oc, cc, logc, payload), (wp, op, cp, logp, _) = runs
    np.testing.assert_array_equal(oc, op)
    np.testing.assert_array_equal(cc, cp)
    # the expected lanes: every packet's answer, once
    want = np.zeros_like(oc).reshape(-1, COORDS_PER_PACKET)
    by = payload.reshape(-1, 128).astype(np.uint32)
    slot = np.arange(len(by)) % 16
    want[:, :128] = (by * 3 + slot[:, None]) & 0xFFFF
    np.testing.assert_array_equal(oc, want.reshape(-1))
    assert sorted(logc) == sorted(logp)        # same packets, flags, rounds (with wrap-around)
    assert {e[1] for e in logc} >= {0xFFFFFFFF, 0}
    sc, sp = wc.stats, wp.stats
    for f in ("packets", "retransmits", "deadlines", "stray_results", "partial_results",
              "min_count", "missing_ranks"):
        assert getattr(sc, f) == getattr(sp, f), f
    assert sc.retransmits == sum(1 for k in range(300) if k % 7 == 3)
    assert sc.stray_results > 0 and sc.partial_results > 0 and sc.missing_ranks == {1}
    assert (wc.next_round["data"] == wp.next_round["data"]).all()
    assert wc.srtt is not None and wp.srtt is not None
    # the same repair store (issue 16, H3: each slot's last answered packet, as a RETX)
    (rc, rlc), (rp, rlp) = wc.repair["data"], wp.repair["data"]
    np.testing.assert_array_equal(rlc, rlp)
    assert (rlc > 0).all()
    np.testing.assert_array_equal(rc, rp)


def test_polling_before_sleep_never_holds_back_a_timer(monkeypatch):
    """host/busywait.py: with nothing to receive, the C loop polls up to SPIN_US before it
    sleeps, but never past its earliest timer. With a 10 s poll, the scripted switch's ~40
    dropped DATA are still retransmitted at their timeouts: the exchange ends (in ~2 s; an
    uncapped poll would take 40 x 10 s) with the same retransmissions as without polling."""
    monkeypatch.setattr(slots_mod, "SPIN_US", 10_000_000)
    done: list = []
    t = threading.Thread(target=lambda: done.append(scripted_exchange(True)), daemon=True)
    t.start()
    t.join(120)
    assert done, "the exchange did not end: a poll held back the retransmission timers"
    win = done[0][0]
    assert win.stats.retransmits == sum(1 for k in range(300) if k % 7 == 3)


@pytest.mark.parametrize(("lane_bits", "out_dtype"), [
    (8, np.uint8), (8, np.uint16), (8, np.uint32), (16, np.uint16), (16, np.uint32),
    (32, np.uint32)])
def test_both_loops_land_every_lane_width_in_every_sums_width(lane_bits, out_dtype):
    """The C loop's lane copy (``lanes_into``: a copy, SSE2 byte swaps and widenings) against
    the Python loop and the scripted switch's own lanes, for results in 8-, 16- and 32-bit
    lanes (big endian) into sums of 8, 16 or 32 bits: every byte of every lane lands."""
    runs = [scripted_exchange(native, n=120, lane_bits=lane_bits, out_dtype=out_dtype)
            for native in (True, False)]
    (_, oc, cc, _, payload), (_, op, cp, _, _) = runs
    assert oc.dtype == out_dtype and op.dtype == out_dtype
    want = np.zeros(oc.shape, dtype=np.uint32).reshape(-1, COORDS_PER_PACKET)
    by = payload.reshape(-1, 128)
    for k in range(len(by)):
        want[k, :128] = lane_value(by[k], k % 16, lane_bits)
    np.testing.assert_array_equal(oc, want.reshape(-1))
    np.testing.assert_array_equal(op, want.reshape(-1))
    np.testing.assert_array_equal(cc, cp)
    if lane_bits == 32:
        assert (want >> 24).any() and ((want >> 8) & 0xFF).any()   # every byte was exercised


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_sums_narrower_than_the_lanes_are_refused(native):
    with pytest.raises(ValueError, match="at least 2 byte"):
        scripted_exchange(native, n=4, lane_bits=16, out_dtype=np.uint8)


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_results_with_another_token_are_ignored_and_counted(native):
    """Issue 16: a RESULT from the switch's address with another token (a forger who cannot read
    the job's) never reaches the sums: both loops count it with the foreign results."""
    win, out, _, _, payload = scripted_exchange(native, token=0x5EC2E7A1,
                                                    sw=ScriptedSwitch(forged=True))
    want = np.zeros_like(out).reshape(-1, COORDS_PER_PACKET)
    by = payload.reshape(-1, 128).astype(np.uint32)
    want[:, :128] = (by * 3 + (np.arange(len(by)) % 16)[:, None]) & 0xFFFF
    np.testing.assert_array_equal(out, want.reshape(-1))
    assert win.stats.foreign_results >= 300


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_results_of_another_session_are_ignored(native):
    """Issue 33: a RESULT whose low 32 round bits and token are right but whose ``round_hi``
    is not (a result of a session 2^32 rounds away, replayed) never reaches the sums: both
    loops compare all 48 bits of the round (the rounds here also cross 2^32)."""
    win, out, _, _, payload = scripted_exchange(native, sw=ScriptedSwitch(other_session=True))
    want = np.zeros_like(out).reshape(-1, COORDS_PER_PACKET)
    by = payload.reshape(-1, 128).astype(np.uint32)
    want[:, :128] = (by * 3 + (np.arange(len(by)) % 16)[:, None]) & 0xFFFF
    np.testing.assert_array_equal(out, want.reshape(-1))
    assert win.stats.stray_results >= 300


def test_c_loop_raises_the_give_up_with_the_missing_ranks():
    """No answer ever: the exact policy gives up, asks with PEEK, names the absent ranks."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    stop = threading.Event()
    peeks = []

    def peer() -> None:
        sock.settimeout(0.05)
        while not stop.is_set():
            try:
                d, addr = sock.recvfrom(4096)
            except TimeoutError:
                continue
            h = list(H.unpack_from(d))
            if h[_I["flags"]] & 0x08:
                peeks.append(tuple(h))
                h[_I["msg_type"]] = int(MsgType.RESULT)
                h[_I["bitmap"]] = 0b101
                sock.sendto(H.pack(*h) + bytes(512), addr)

    t = threading.Thread(target=peer, daemon=True)
    t.start()
    ep = UdpEndpoint(sock.getsockname())
    win = SlotWindow(ep, 3, 0, 4, 4, SlotConfig(rto=0.02, max_rto=0.05, give_up=0.3))
    win.native = True
    try:
        with pytest.raises(SlotTimeoutError, match=r"missing ranks \[1, 3\]") as exc:
            win.exchange_into("data", MsgType.DATA, 4, np.zeros(10 * 128, np.uint8),
                              np.full(10, 256), np.arange(10) * 256, MsgType.RESULT,
                              np.zeros(10 * 256, np.uint32), 1)
    finally:
        stop.set()
        t.join(2)
        ep.close()
        sock.close()
    assert win.last_native
    assert exc.value.missing == [1, 3]
    assert win.stats.retransmits > 4 and len(peeks) == 1


@pytest.mark.parametrize("n", [2, 4])
def test_c_and_python_loops_give_the_same_exact_sums(n):
    codec = THCCodec()
    numel = 70_001
    xs = worker_data(n, numel, 21)
    encs = encode_all(codec, xs)
    want = packed_sums(codec, encs)
    with EmbeddedNetwork(n, num_slots=32) as net:
        results = {}
        for i, native in enumerate((True, False, True)):
            aggs = []
            for r in range(n):
                a = net.address(r)
                agg = NetworkAggregator(UdpEndpoint(a.switch, bind=(a.ip, 0)),
                                        JobSpec(net.job_id, r, n, num_slots=32,
                                                round_base=1 + (i << 20), token=net.token))
                agg.window.native = native
                aggs.append(agg)
            try:
                got = run_workers(n, lambda r: aggs[r].sum_encoded(encs[r], codec))  # noqa: B023
            finally:
                for a in aggs:
                    a.ep.close()
            assert all(a.window.last_native == native for a in aggs)
            results[i] = got
    for got in results.values():
        assert_exact_sums(got, n, want)


def test_c_loop_allreduce_equals_the_in_process_protocol():
    n = 4
    codec = THCCodec()
    xs = worker_data(n, 20_000, 7)
    with EmbeddedNetwork(n, num_slots=16) as net:
        aggs = [NetworkAggregator(UdpEndpoint(net.address(r).switch, bind=(net.address(r).ip, 0)),
                                  JobSpec(net.job_id, r, n, num_slots=16, token=net.token)) for r in range(n)]
        for a in aggs:
            a.window.native = True   # also under NETCO_TRANSPORT_C=0
        got = run_and_close(aggs, lambda r: aggs[r].allreduce(xs[r], codec))
    assert all(a.window.last_native for a in aggs)
    assert_bit_identical(codec, xs, got)


def _relayed(net: EmbeddedNetwork, rank: int, slots: SlotConfig, **faults):
    a = net.address(rank)
    relay = FaultyRelay(a.switch, a.ip, seed=rank, **faults)
    ep = UdpEndpoint(relay.address, bind=("127.0.0.1", 0))
    agg = NetworkAggregator(ep, JobSpec(net.job_id, rank, net.workers, num_slots=net.num_slots,
                                        token=net.token),
                            slots)
    agg.window.native = True
    return agg, relay


@pytest.mark.parametrize("faults", FAULTS, ids=FAULT_IDS)
def test_c_loop_sums_stay_exact_under_faults(faults):
    aggs, relays = allreduce_under_faults(lambda net, r, slots: _relayed(net, r, slots, **faults))
    assert all(a.window.last_native for a in aggs)
    assert_faults_in_effect(faults, [relay.stats for relay in relays], aggs)
    if faults.get("dup_pct"):
        assert sum(a.window.stats.stray_results for a in aggs) > 0   # duplicates ignored


def test_c_loop_worker_killed_mid_round_partial_sums_are_exact_per_packet():
    """Rank 3 (C loop behind a relay that goes silent after 20 DATA packets) dies; the others
    (C loop) get m = 3 from the switch's deadline release, per packet exact."""
    n, numel = 4, 64 * 256
    codec = THCCodec()
    xs = worker_data(n, numel, 9)
    encs = encode_all(codec, xs)
    with EmbeddedNetwork(n, num_slots=8) as net:
        # counts must be n or n - 1 only: a generous wait once the dead rank is known
        slots = SlotConfig(policy="partial", deadline=0.3, rto=0.02, max_rto=0.1, suspect_wait=0.1)
        aggs = [NetworkAggregator(UdpEndpoint(net.address(r).switch, bind=(net.address(r).ip, 0)),
                                  JobSpec(net.job_id, r, n, num_slots=8, token=net.token), slots)
                for r in range(n - 1)]
        for a in aggs:
            a.window.native = True
        dying, relay = _relayed(net, n - 1, SlotConfig(give_up=1.0, rto=0.02), die_after=20)

        try:
            sums_with_a_dying_worker(n, aggs, dying, encs, codec)
        finally:
            for ag in [*aggs, dying]:
                ag.ep.close()
            relay.close()
    assert all(a.window.last_native for a in [*aggs, dying])
    assert all(a.window.stats.missing_ranks == {3} for a in aggs)
    # issue 16, H4: once rank 3 is suspected, the lowest live rank asks for the sums and the
    # others only back it up (at twice the wait), so some live ranks may never need to ask
    assert sum(a.window.stats.deadlines for a in aggs) > 0


def test_endpoints_expose_their_socket_only_with_mmsg():
    ep = UdpEndpoint(("127.0.0.1", 9), mmsg=False)
    try:
        assert ep.native(540) is None
    finally:
        ep.close()
    ep = UdpEndpoint(("127.0.0.1", 9))
    try:
        fd, raw, dest, *_ = ep.native(540)
        assert fd == ep.sock.fileno() and raw == 0 and len(dest) == 16
    finally:
        ep.close()
    assert hasattr(RawEndpoint, "native")


def test_without_the_extension_the_python_loop_runs(monkeypatch):
    monkeypatch.setattr(slots_mod, "_slotloop", None)
    _win, out, cnt, log, _ = scripted_exchange(True, n=40, W=8, expect=False)
    assert (cnt > 0).all() and len(log) >= 40 and out.any()


def test_a_replaced_send_many_keeps_the_python_loop():
    """A hook on the endpoint object (tests kill a worker from inside send_many) must see every
    datagram, so the C loop, which bypasses it, is not used then."""
    ep = UdpEndpoint(("127.0.0.1", 9))
    try:
        assert ep.native(540) is not None
        inner = ep.send_many
        ep.send_many = lambda dgs: inner(dgs)
        assert ep.native(540) is None
    finally:
        ep.close()
