"""Issue 16 (hardening) on the worker side: forged results, the job's lane width, a switch
restart mid-job, a dead rank under the partial policy. The switch is the software target on
loopback UDP (``control_plane.embedded.EmbeddedNetwork``); every case runs the C slot loop and
the Python loop."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest
import torch

from control_plane.embedded import EmbeddedNetwork
from host.protocol import codec as wire
from host.protocol import layout as lay
from host.thc import THCCodec
from host.thc.simulate import allreduce as simulated_allreduce
from host.thc.simulate import encode_workers, table_values
from host.transport import slots as slotmod
from host.transport.faults import FaultyRelay
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from host.transport.slots import FAST_FLOOR, SlotConfig
from tests.support.scripted import AbsentHoldingSwitch, deadline_exchange, deadline_exchanges
from tests.support.token import TOKEN
from tests.support.transport import in_background, run_and_close, run_workers, worker_data

NATIVE = [pytest.param(True, id="c-loop"), pytest.param(False, id="python-loop")]


def _aggregators(net: EmbeddedNetwork, base: int, native: bool, slots: SlotConfig | None = None,
                 ranks: range | None = None, **spec) -> list[NetworkAggregator]:
    out = []
    for r in ranks if ranks is not None else range(net.workers):
        a = net.address(r)
        ep = UdpEndpoint(a.switch, bind=(a.ip, 0))
        js = JobSpec(net.job_id, r, net.workers, num_slots=net.num_slots, round_base=base, **spec,
                     token=net.token)
        agg = NetworkAggregator(ep, js, slots)
        agg.window.native = native and slotmod.NATIVE
        out.append(agg)
    return out


def _forged_results(job_id: int, slots: int, base: int, rounds: int, lane_bits: int = 8) -> list[bytes]:
    """RESULT datagrams for every (slot, round) a worker will have outstanding, all lanes 0xFF."""
    pay = bytes([0xFF]) * (lay.COORDS_PER_PACKET * lane_bits // 8)
    out = []
    for kind in (lay.MsgType.RESULT, lay.MsgType.NORM_RESULT):
        lb = 32 if kind == lay.MsgType.NORM_RESULT else lane_bits
        p = pay if lb == lane_bits else bytes([0x7F]) * (lay.NORMS_PER_PACKET * 4)
        for s in range(slots):
            for k in range(rounds):
                r = base + k
                h = wire.Header(token=TOKEN, msg_type=kind, job_id=job_id, slot=s, round=r, slot_set=r & 1,
                                lane_bits=lb, rank=lay.RANK_ALL, count=2, bitmap=3,
                                elem_count=lay.COORDS_PER_PACKET)
                out.append(wire.pack_header(h) + p)
    return out


@pytest.mark.parametrize("native", NATIVE)
def test_forged_results_from_another_address_change_no_sum(native):
    """S1: a local process floods every worker's socket with well-formed RESULTs for every
    outstanding (slot, round); results are accepted only from the switch's address and port."""
    n, numel = 2, 16 * 4096
    codec = THCCodec()
    xs = worker_data(n, numel, 5)
    with EmbeddedNetwork(n, num_slots=16) as net:
        base = 1000
        aggs = _aggregators(net, base, native)
        forged = _forged_results(net.job_id, 16, base, numel // 256 // 16 + 2)
        targets = [a.ep.address for a in aggs]
        sent = [0]

        def flood(stop: threading.Event) -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.99", 0))
                while not stop.is_set():
                    for d in forged:
                        for t in targets:
                            s.sendto(d, t)
                            sent[0] += 1

        with in_background(flood):
            got = run_and_close(aggs, lambda r: aggs[r].allreduce(xs[r], codec))
    assert sent[0] > 1000
    ref = simulated_allreduce(codec, xs, round=0).average
    for a, g in zip(aggs, got, strict=True):
        assert torch.equal(g, ref)
        assert a.window.stats.foreign_results > 0   # counted, not taken


@pytest.mark.parametrize("native", NATIVE)
def test_a_lane_width_the_worker_was_not_told_fails_loudly(native):
    """S2: the controller installs 16-bit lanes for 2 workers; a worker that assumes the
    derived 8 bits raises LaneMismatchError naming both widths (before: garbage sums)."""
    codec = THCCodec()
    xs = worker_data(2, 5000, 2)
    with EmbeddedNetwork(2, num_slots=8, job={"lane_bits": 16}) as net:
        aggs = _aggregators(net, 1, native, SlotConfig(give_up=3.0))
        try:
            errs = run_workers(2, lambda r: _raises(lambda: aggs[r].allreduce(xs[r], codec)))
        finally:
            for a in aggs:
                a.ep.close()
    for e in errs:
        assert isinstance(e, slotmod.LaneMismatchError), e
        assert "16-bit" in str(e) and "expects 8" in str(e)


@pytest.mark.parametrize("native", NATIVE)
def test_the_job_lane_width_from_the_controller_gives_exact_sums(native):
    """S2: with JobSpec.lane_bits = the job's 16, the sums are exact."""
    codec = THCCodec()
    xs = worker_data(2, 5000, 2)
    with EmbeddedNetwork(2, num_slots=8, job={"lane_bits": 16}) as net:
        aggs = _aggregators(net, 1, native, lane_bits=16)
        try:
            got = run_workers(2, lambda r: aggs[r].allreduce(xs[r], codec))
        finally:
            for a in aggs:
                a.ep.close()
    ref = simulated_allreduce(codec, xs, round=0).average
    for g in got:
        assert torch.equal(g, ref)


def test_jobspec_refuses_lanes_too_narrow_for_the_job():
    with pytest.raises(ValueError, match="cannot hold n·g = 16·30"):
        JobSpec(1, 0, 16, lane_bits=8, token=TOKEN)


def _raises(fn):
    try:
        fn()
    except Exception as exc:
        return exc
    return None


def restarts_mid_job(net: EmbeddedNetwork, aggs: list, xs: list, codec, restarts: int,
                     iterations: int) -> tuple[list, int]:
    """Every worker runs ``iterations`` all-reduces while the switch is killed and restarted
    (then re-applied by the controller) ``restarts`` times, each while at least two all-reduces
    remain for every worker (a worker that has finished its job answers nobody; the workers'
    last three wait until every restart happened). Returns every worker's results and the
    restarts done."""
    done = [0] * len(aggs)
    finished = threading.Event()
    count = [0]

    def chaos() -> None:
        import time

        while count[0] < restarts and not finished.is_set():
            if max(done) <= iterations - 3 and min(done) >= 1:
                net.restart_switch()
                count[0] += 1
                time.sleep(0.05)
            else:
                time.sleep(0.01)

    def work(r: int) -> list:
        import time

        out = []
        for i in range(iterations):
            if i == iterations - 3:
                # a fast machine would otherwise finish before every restart happened: the
                # last all-reduces wait for them (the restarts still hit rounds in flight)
                end = time.monotonic() + 300
                while count[0] < restarts and time.monotonic() < end:
                    time.sleep(0.005)
            out.append(aggs[r].allreduce(xs[r], codec))
            done[r] += 1
        return out

    th = threading.Thread(target=chaos, daemon=True)
    th.start()
    try:
        got = run_workers(len(aggs), work, timeout=600)
    finally:
        finished.set()
        th.join(120)
    return got, count[0]


def _restarts_mid_job_stay_exact(native: bool, restarts: int, seed: int, iterations: int) -> None:
    """3 workers all-reduce ``iterations`` times while the switch restarts ``restarts`` times
    (:func:`restarts_mid_job`); every rank's every result is the exact THC sum of its round."""
    n = 3
    codec = THCCodec()
    xs = worker_data(n, 64 * 1024, seed)
    with EmbeddedNetwork(n, num_slots=32) as net:
        aggs = _aggregators(net, 1, native, SlotConfig(give_up=60.0, max_rto=0.2))
        try:
            got, did = restarts_mid_job(net, aggs, xs, codec, restarts, iterations=iterations)
        finally:
            for a in aggs:
                a.ep.close()
    assert did == restarts
    for k in range(len(got[0])):
        ref = simulated_allreduce(codec, xs, round=k).average   # the k-th call's THC round
        for per_rank in got:
            assert torch.equal(per_rank[k], ref)


@pytest.mark.parametrize("native", NATIVE)
def test_switch_restarts_mid_job_never_deadlock(native):
    """H3: the switch crashes and comes back empty (the controller re-applies) while workers
    are mid-round; every all-reduce still completes, bit-exact, on every rank."""
    _restarts_mid_job_stay_exact(native, restarts=3, seed=4, iterations=3 * 6 + 3)


@pytest.mark.parametrize("native", NATIVE)
def test_a_switch_restart_during_the_last_round_of_a_job_completes(native):
    """H3, the job's last exchange: ranks 0 and 1 get every result of the job's last
    all-reduce and leave (``close``); rank 2's results of that round are cut off (a relay drops
    its RESULTs) until the switch has been restarted and re-applied, so the stored results and
    the contributions of ranks 0 and 1 died with it. Before the closing exchange, ranks 0 and 1
    had closed their sockets and rank 2 timed out naming them; now they wait in the closing
    exchange, their repairs complete rank 2's round, and every rank's sum is exact."""
    n = 3
    codec = THCCodec()
    xs = worker_data(n, 16 * 256, 11)
    with EmbeddedNetwork(n, num_slots=16) as net:
        cfg = SlotConfig(give_up=20.0, max_rto=0.2)
        aggs = _aggregators(net, 1, native, cfg, ranks=range(n - 1))
        a2 = net.address(2)
        relay = FaultyRelay(a2.switch, a2.ip)
        ep2 = UdpEndpoint(relay.address, bind=(a2.ip, 0))
        agg2 = NetworkAggregator(ep2, JobSpec(net.job_id, 2, n, num_slots=16, token=net.token), cfg)
        agg2.window.native = native and slotmod.NATIVE
        aggs.append(agg2)
        cut = threading.Event()
        cut.set()
        relay.drop_down = lambda d: cut.is_set() and wire.unpack_header(d).msg_type == lay.MsgType.RESULT
        reduced = [threading.Event() for _ in range(n)]
        closed = [threading.Event() for _ in range(n)]

        def work(r: int) -> torch.Tensor:
            out = aggs[r].allreduce(xs[r], codec)      # the job's one and last all-reduce
            reduced[r].set()
            aggs[r].close()
            closed[r].set()
            return out

        def chaos() -> None:
            for r in (0, 1):
                assert reduced[r].wait(60)
            rank2_waiting = not reduced[2].is_set()
            net.restart_switch()
            cut.clear()
            seen.append(rank2_waiting)

        seen: list[bool] = []
        th = threading.Thread(target=chaos, daemon=True)
        th.start()
        try:
            got = run_workers(n, work, timeout=120)
        finally:
            th.join(60)
            relay.close()
            for a in aggs:
                a.ep.close()
    assert seen == [True]                       # rank 2 still waited for the last round
    ref = simulated_allreduce(codec, xs, round=0).average
    for g in got:
        assert torch.equal(g, ref)
    assert all(a.finished for a in aggs)        # every rank was in the closing exchange
    assert sum(a.window.stats.repairs for a in aggs[:2]) > 0


@pytest.mark.parametrize("native", NATIVE)
def test_a_dead_rank_costs_one_deadline_not_one_per_packet(native):
    """H4: rank 3 never shows up. Only the first window waits the full deadline; every later
    packet is released after about one RTO (a worker's fast DEADLINE request) or, once the
    switch holds rank 3 absent (``--absent-silence`` after ``ABSENT_AFTER`` deadline releases
    without it: tests/host/softswitch/test_softswitch_absent.py), without any request, and the
    sums stay exact for the counts they report (a live worker late by more than that is left
    out of that packet's sum: m = 2, still unbiased)."""
    n, packets = 4, 400
    codec = THCCodec()
    xs = worker_data(n, packets * 256, 8)
    encs = encode_workers(codec, xs)
    vals = table_values(codec, encs)
    with EmbeddedNetwork(n, num_slots=8) as net:
        slots = SlotConfig(policy="partial", deadline=0.3, rto=0.02, max_rto=0.1)
        aggs = _aggregators(net, 1, native, slots, ranks=range(n - 1))
        try:
            got = run_workers(n - 1, lambda r: aggs[r].sum_encoded(encs[r], codec), timeout=120)
        finally:
            for a in aggs:
                a.ep.close()
    live = sum(vals[: n - 1])
    # The full deadline only in the first window (before any partial result named rank 3)
    full = [a.window.stats.deadlines - a.window.stats.fast_deadlines for a in aggs]
    assert all(f <= net.num_slots for f in full), full
    for a, (sums, count) in zip(aggs, got, strict=True):
        st = a.window.stats
        assert 3 in st.missing_ranks
        assert a.window.suspects >> 3 & 1
        assert st.partial_results == packets
        c = count.numpy()
        full = c == n - 1
        assert full.mean() > 0.5
        np.testing.assert_array_equal(sums.numpy().astype(np.int64)[full], live[full])
        assert (c >= 1).all() and (c <= n - 1).all()
        _exact_over_contributors(sums.numpy().astype(np.int64), c, vals[: n - 1])


def _native_or_skip(native: bool) -> None:
    if native and slotmod._slotloop is None:
        pytest.skip("the C slot loop (host/transport/_slotloop) is not built")


def _deadline_requests(log: list) -> dict:
    """DEADLINE requests per (slot, round) in a scripted switch's log."""
    per: dict = {}
    for slot, rnd, _set, flags, *_ in log:
        if flags & int(lay.Flag.DEADLINE):
            per[slot, rnd] = per.get((slot, rnd), 0) + 1
    return per


@pytest.mark.parametrize("native", NATIVE)
def test_a_dead_rank_gets_one_deadline_request_per_slot_round(native):
    """H4: rank 2 of three is dead, rank 1 always in time. The first window asks after the
    full deadline (that result names rank 2 dead), every later packet after the short wait:
    exactly one DEADLINE request per slot and round (no second one while the first one's result
    is on its way), and the wait's gain stays at 1 (nobody live was late)."""
    _native_or_skip(native)
    n, W = 48, 4
    win, cnt, log = deadline_exchange(native, lambda i: 0b011, n, W)
    per = _deadline_requests(log)
    assert len(per) == n and set(per.values()) == {1}, per
    st = win.stats
    assert st.deadlines == n and st.fast_deadlines == n - W
    assert (cnt == 2).all()
    assert win.dead == 0b100 and win.suspects == 0b100
    assert win.gain == 1.0


@pytest.mark.parametrize("native", NATIVE)
def test_a_switch_that_holds_the_dead_rank_absent_is_not_hurried(native):
    """H4: rank 2 is dead and, from packet 16 on, the switch releases every slot without it on
    its own (it holds rank 2 absent). The worker notices (``self_release``: the last partial
    result came without a request of its own) and waits an RTO before asking, not one RTT,
    so that its requests do not cut live ranks out of sums the switch is about to release."""
    _native_or_skip(native)
    n, W = 48, 4
    sw = AbsentHoldingSwitch(lambda i: 0b011, hold_from=16)
    win, cnt, _ = deadline_exchange(native, None, n, W, sw=sw)
    assert (cnt == 2).all() and win.suspects == 0b100
    assert win.self_release
    assert win.stats.deadlines < 16 + W            # none once the switch releases by itself
    assert win._fast_deadline() == pytest.approx(
        max(FAST_FLOOR, min((win.srtt + 4 * win.rttvar) * win.gain, win.cfg.deadline)))
    # a switch that answers only DEADLINE requests: the wait is one smoothed RTT
    win, _, _ = deadline_exchange(native, lambda i: 0b011, n, W)
    assert not win.self_release
    assert win._fast_deadline() == pytest.approx(max(FAST_FLOOR, win.srtt * win.gain))


@pytest.mark.parametrize("native", NATIVE)
def test_a_late_live_rank_lengthens_the_wait_and_is_not_taken_for_dead(native):
    """H4: rank 1 misses the last round (late, not dead): the wait's gain doubles (at least
    once), rank 1 is not taken for dead, and the results say who was in."""
    _native_or_skip(native)
    n, W = 40, 4
    win, cnt, _ = deadline_exchange(native, lambda i: 0b001 if i >= n - W else 0b011, n, W)
    assert (cnt[: n - W] == 2).all() and (cnt[n - W :] == 1).all()
    assert win.dead == 0b100
    assert win.gain >= 2.0
    assert win.suspects == 0b110


def _late_from_round_1(W: int, back: int | None = None):
    """Bitmaps: ranks 0 and 1 in round 0, rank 0 alone from round 1 (rank 1 late) until
    round ``back`` (then both again); rank 2 is dead throughout."""
    return lambda i: 0b001 if i >= W and (back is None or i < back * W) else 0b011


@pytest.mark.parametrize("native", NATIVE)
def test_a_rank_late_at_the_longest_wait_is_taken_for_dead(native):
    """H4: rank 1 is late from round 1 on: its lateness doubles the wait's gain (at least once
    per round) up to ``GAIN_MAX``; late again after that, it counts as dead like rank 2 and no
    longer grows the gain, which eases back (the wait does not stay at its longest)."""
    _native_or_skip(native)
    n, W = 4 * 12, 4
    win, cnt, log = deadline_exchange(native, _late_from_round_1(W), n, W)
    assert (cnt[W:] == 1).all()
    assert win.dead == 0b110
    assert set(_deadline_requests(log).values()) == {1}


@pytest.mark.parametrize("native", NATIVE)
def test_a_rank_taken_for_dead_is_live_again_once_in_a_result(native):
    """H4: as above, but rank 1 is back in time from round 9 (after it was taken for dead, as
    the test above shows for the same rounds): the first result with it in takes it off the
    dead ranks, so its next lateness grows the gain again."""
    _native_or_skip(native)
    n, W = 4 * 12, 4
    win, cnt, _ = deadline_exchange(native, _late_from_round_1(W, back=9), n, W)
    assert (cnt[W : 9 * W] == 1).all() and (cnt[9 * W :] == 2).all()
    assert win.dead == 0b100


@pytest.mark.parametrize("native", NATIVE)
def test_a_worker_never_takes_itself_for_dead(native):
    """H4: results that leave this worker out (it was late itself) name only the others dead
    and are no sign that another worker is late."""
    _native_or_skip(native)
    n, W = 24, 4
    win, cnt, _ = deadline_exchange(native, lambda i: 0b010 if i < W or i >= n - W else 0b011,
                                    n, W)
    assert (cnt[:W] == 1).all() and (cnt[n - W :] == 1).all()
    assert win.dead == 0b100
    assert win.gain == 1.0


def _fixed_wait(wait: float) -> SlotConfig:
    """Partial policy with a fixed fast wait (the gain still moves; the times it is compared
    with are whole waits: no timing)."""
    return SlotConfig(policy="partial", deadline=1.0, rto=0.05, max_rto=0.2, suspect_wait=wait)


@pytest.mark.parametrize("native", NATIVE)
def test_a_rank_that_starts_its_exchange_late_does_not_grow_the_wait(native):
    """H4: rank 1 starts the second exchange two rounds after rank 0 (in none of its first
    results, in every one after): not late by a bit but not started yet, so the wait's gain
    stays at 1. Before, its absence doubled the gain once per round trip (to 4 here, to 16 with
    a start skew of a few milliseconds), and the rest of the exchange waited that long."""
    _native_or_skip(native)
    W = 4
    late_start = [lambda i: 0b011, lambda i: 0b001 if i < 2 * W else 0b011]
    win, (_, cnt) = deadline_exchanges(native, late_start, 4 * W, W, _fixed_wait(0.05))
    assert (cnt[: 2 * W] == 1).all() and (cnt[2 * W :] == 2).all()
    assert win.dead == 0b100
    assert win.gain == 1.0


@pytest.mark.parametrize("native", NATIVE)
def test_a_rank_absent_from_a_whole_exchange_still_grows_the_wait(native):
    """H4: rank 1 is in no result of the second exchange (later than the wait from its start,
    or dead): after ``ABSENT_WAITS`` waits without it its absence counts again, once per
    ``ABSENT_WAITS`` waits (each round takes at least one wait: 64 rounds are enough for
    five), so the gain doubles up to ``GAIN_MAX`` and rank 1 is then taken for dead (which
    only a late rank at ``GAIN_MAX`` is)."""
    _native_or_skip(native)
    W = 4
    win, (_, cnt) = deadline_exchanges(native, [lambda i: 0b011, lambda i: 0b001], 64 * W, W,
                                       _fixed_wait(0.005))
    assert (cnt == 1).all()
    assert win.dead == 0b110


def test_the_c_loop_moves_the_gain_as_the_python_loop_does():
    if slotmod._slotloop is None:
        pytest.skip("the C slot loop (host/transport/_slotloop) is not built")
    assert slotmod._slotloop.GAIN_MAX == slotmod.GAIN_MAX
    assert slotmod._slotloop.GAIN_EASE == slotmod.GAIN_EASE
    assert slotmod._slotloop.ABSENT_WAITS == slotmod.ABSENT_WAITS


def _exact_over_contributors(sums: np.ndarray, counts: np.ndarray, vals: list) -> None:
    """Every packet's sum is exactly the sum of ``count`` of the live ranks' values: the
    switch's count is honest about who is in, and nothing else is (no dead rank, no double
    count, no stale round)."""
    from itertools import combinations

    live = range(len(vals))
    P = lay.COORDS_PER_PACKET
    for k in range(len(sums) // P):
        sl = slice(k * P, (k + 1) * P)
        m = int(counts[k * P])
        assert (counts[sl] == m).all()
        assert any(np.array_equal(sums[sl], sum(vals[r][sl] for r in who))
                   for who in combinations(live, m)), (k, m)


@pytest.mark.slow
def test_twenty_switch_restarts_mid_job_never_deadlock():
    """H3 at the issue's scale: 20 restarts mid-job (C loop), no deadlock, every sum exact."""
    _restarts_mid_job_stay_exact(True, restarts=20, seed=6, iterations=20 * 4 + 4)
