#!/usr/bin/env python3
"""Chaos suite (issue 16): hostile but honest inputs against the software target, the
workers' transport and the controller, as measurements. Prints one JSON object::

    {"fuzz_member_addresses": {"exact", "clean_s", "fuzzed_s", "ratio", "datagrams", ...},
     "forged_results":        {"exact", "forged", "foreign_results", ...},
     "far_future_rounds":     {"stalled", "error", ...},
     "switch_restarts":       {"restarts", "deadlocks", "exact", "repairs", ...},
     "dead_rank_partial":     {"healthy_pkt_s", "dead_pkt_s", "ratio", "exact_where_full", ...},
     "idle_streams":          {"streams", "status_s", "answered"},
     "start_flood", "replay", "cross_job", "token_flood", "port_flood", "values_above_g",
     "lapping_member": ...}
    (every class also "held": true when what it checks held)

Every class runs on loopback (no root): one ``python -m host.softswitch`` process configured
by the controller (``control_plane.embedded.EmbeddedNetwork``), workers as threads with their
own addresses (the C slot loop when built). What each class does and what it must show:

fuzz_member_addresses
    junk (one byte, random bytes, THC headers with random fields) from every member's IPv4
    address on other UDP ports, every ``--fuzz-gap`` seconds, during all-reduces: sums
    bit-exact, completion time within 2x of the same all-reduces without fuzz.
forged_results
    a local process floods every worker's socket with well-formed RESULT/NORM_RESULT datagrams
    for every (slot, round) the workers will have outstanding: no wrong sum.
far_future_rounds
    after two all-reduces, 32 DATA/NORM packets from a member's address (another UDP port),
    2^30 rounds ahead of the slot copies the third uses, once without the job's token and once with
    it (an attacker who copied the token but cannot see the rounds): no stall; the first are
    dropped as BAD_SENDER, the second as AHEAD (docs/security.md; a copy never used opens for
    any round, so the token is what protects those).
switch_restarts
    ``--restarts`` SIGKILLs of the switch mid-job, each followed by a fresh start and the
    operator's recovery, ``netco controller apply FILE`` (the real command, a subprocess, with
    the controller file on disk and its token state in a temporary ``NETCO_STATE_DIR``; the
    job's token comes back from the state file, not from the benchmark): no deadlock, every
    sum bit-exact.
dead_rank_partial
    one of four ranks never shows up (partial policy): packets/s per worker after the first
    deadline against a healthy run of the same size, ``--dead-repeats`` alternating pairs
    (medians; single runs on a shared machine scatter by 2x and more). ``--dead-target bmv2``
    or ``both``: the same on BMv2 (under ``"bmv2"``; root, Mininet): ``netco testbed``'s rack
    of ``mininet/rack.yaml`` with its job partial-policy and 64 slots, ``simple_switch_grpc``
    configured by the controller applying that file, raw-endpoint workers in the hosts,
    ``--dead-bmv2-packets`` per worker; ``{"skipped": why}`` without BMv2 (then ``held``
    covers only ``held_targets``).
idle_streams
    ``--streams`` (40) P4Runtime streams that never arbitrate, reopened as they are closed,
    then ``controller status``: it still answers (issue 33, 6: 32 locked it out).
start_flood
    issue 33, 1: a member's address (another UDP port) with the job's token sends START
    contributions 2^30 rounds ahead into every slot copy between two all-reduces of a
    partial-policy job: every rank returns (a result or an error) within its give-up instead
    of hanging, and the next session (``host.transport.session.start_session``, as attach opens
    it) is exact.
replay
    issue 33, 2: session 1's START contributions (every slot copy, with the token) replayed
    into session 2, opened 2^31 + 2 rounds later (35.8 min of clock: the band where 32-bit
    rounds called them newer): dropped STALE, session 2 exact and opened at its first
    candidate (48-bit rounds, docs/protocol.md "Sessions").
cross_job
    issue 33, 3: two jobs with members on one host; job B's valid status requests from the
    shared address (another port) during job A's all-reduces: A's sums exact, few retransmits.
token_flood
    issue 33, 4: one socket floods wrong-token datagrams during all-reduces: sums exact, the
    all-reduces within 2x of clean ones, the socket held by the rate limit (its right-token
    status request unanswered).
lapping_member
    issue 33, 1 (its last sentence): between all-reduces, a member's address (another port)
    with the job's token sends every copy's round after next, without ``START``: dropped as
    ``AHEAD`` (it reset the copies, and every rank gave up), sums exact.
values_above_g
    issue 33, 5: a member's address sends values-uplink DATA of 255 per lane into the copies
    the next all-reduce uses: dropped (``MALFORMED``), the sum exact.
sender_port
    issue 33, "the sender binding includes the port": ``start_flood``'s spoofed STARTs (rank
    0's address, another UDP port, the job's token) against a job installed with a
    ``worker_port`` its workers bind: every one dropped as ``BAD_SENDER``, the all-reduce after
    them exact with no give-up.
port_flood
    issue 33, 4 and the port binding together: ``token_flood`` by a token holder, status
    requests with the job's token from rank 0's address on a port its ``worker_port`` binding
    does not name: ``BAD_SENDER``, so the rate limit holds the socket (``RATE_LIMITED``); sums
    exact, the all-reduces within 2x of clean ones.

Every class reports ``held``: whether what it checks held.

    .venv/bin/python benchmarks/chaos.py --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from control_plane.controller import Controller, run_sync
from control_plane.embedded import EmbeddedNetwork, jobs_sharing_hosts
from control_plane.tokens import ENV_STATE_DIR
from host.bench.alongside import sending_alongside
from host.paths import REPO
from host.protocol import codec as wire
from host.protocol import layout as lay
from host.thc import THCCodec
from host.thc.simulate import allreduce as simulated_allreduce
from host.thc.simulate import encode_workers, table_values
from host.transport.job import JobSpec, NetworkAggregator, session_round_base
from host.transport.ports import UdpEndpoint
from host.transport.slots import SlotConfig, SlotTimeoutError


def _data(n: int, numel: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(numel, generator=g) * (1 + r) for r in range(n)]


def _aggs(net: EmbeddedNetwork, base: int, slots: SlotConfig | None = None,
          ranks: range | None = None) -> list[NetworkAggregator]:
    """Aggregators of ``net``'s ranks, each bound to its address and the job's ``worker_port``
    (an ephemeral port where the job names none)."""
    out = []
    for r in ranks if ranks is not None else range(net.workers):
        a = net.address(r)
        ep = UdpEndpoint(a.switch, bind=(a.ip, a.port))
        out.append(NetworkAggregator(ep, JobSpec(net.job_id, r, net.workers,
                                                 num_slots=net.num_slots, round_base=base,
                                                 token=net.token), slots))
    return out


def _run(aggs: list, fn, timeout: float = 300.0) -> list:
    """``fn(rank_index)`` in one thread per aggregator; results or the exceptions raised."""
    out: list = [None] * len(aggs)

    def go(i: int) -> None:
        try:
            out[i] = fn(i)
        except BaseException as exc:   # reported, not raised: a measurement
            out[i] = exc

    ts = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(len(aggs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    return [TimeoutError("hung") if t.is_alive() else o for t, o in zip(ts, out, strict=True)]


def _workload(n: int, numel: int, seed: int, k: int) -> tuple[THCCodec, list, list]:
    """The codec, ``n`` workers' tensors of ``numel`` and the references of ``k`` all-reduces."""
    codec = THCCodec()
    xs = _data(n, numel, seed)
    return codec, xs, [simulated_allreduce(codec, xs, round=i).average for i in range(k)]


def _timed_allreduces(net: EmbeddedNetwork, base: int, xs: list, codec: THCCodec,
                      k: int) -> tuple[list, float]:
    """``k`` all-reduces of every rank through fresh aggregators of round base ``base`` (closed
    after): the results and the seconds they took."""
    aggs = _aggs(net, base)
    t0 = time.monotonic()
    got = _allreduces(aggs, xs, codec, k)
    seconds = time.monotonic() - t0
    _close(aggs)
    return got, seconds


def _close(aggs: list) -> None:
    for a in aggs:
        a.ep.close()


def _exact(got: list, refs: list[torch.Tensor]) -> bool:
    """Every rank's k-th result equals the k-th reference bit for bit."""
    return all(not isinstance(g, BaseException)
               and all(torch.equal(x, r) for x, r in zip(g, refs, strict=True)) for g in got)


def _allreduces(aggs: list, xs: list, codec: THCCodec, k: int) -> list:
    return _run(aggs, lambda i: [aggs[i].allreduce(xs[aggs[i].rank], codec) for _ in range(k)])


# -- classes ---------------------------------------------------------------------------------
def fuzz_member_addresses(args: argparse.Namespace) -> dict:
    n, k = 4, args.iterations
    codec, xs, refs = _workload(n, args.elements, 1, k)
    with EmbeddedNetwork(n, num_slots=32) as net:
        clean, clean_s = _timed_allreduces(net, 1, xs, codec, k)
        stop = threading.Event()
        sent = [0]

        def fuzz() -> None:
            rng = random.Random(7)
            socks = []
            for r in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind((net.address(r).ip, 0))
                socks.append((s, net.address(r).switch))
            while not stop.is_set():
                for s, dst in socks:
                    kind = rng.randrange(3)
                    if kind == 0:
                        d = b"\x01"
                    elif kind == 1:
                        d = rng.randbytes(rng.randrange(1, 1200))
                    else:
                        h = wire.Header(msg_type=rng.choice(list(lay.MsgType)), job_id=rng.choice(
                            [net.job_id, rng.randrange(65536)]), rank=rng.randrange(n + 2),
                            slot=rng.randrange(40), round=rng.randrange(1 << 32),
                            lane_bits=rng.choice([4, 8, 16, 32]), flags=rng.randrange(16))
                        d = wire.pack_header(h) + rng.randbytes(rng.choice([0, 128, 256, 512]))
                    with contextlib.suppress(OSError):
                        s.sendto(d, dst)
                        sent[0] += 1
                stop.wait(args.fuzz_gap)
            for s, _ in socks:
                s.close()

        th = threading.Thread(target=fuzz, daemon=True)
        th.start()
        aggs = _aggs(net, 1 << 20)
        t0 = time.monotonic()
        fuzzed = _allreduces(aggs, xs, codec, k)
        fuzzed_s = time.monotonic() - t0
        stop.set()
        th.join(5)
        _close(aggs)
        drops = {int(k): v for k, v in net.status()[0].counters.get("ingress.drops", {}).items()
                 if v}
    return {"workers": n, "allreduces": k, "elements": args.elements, "exact": _exact(clean, refs)
            and _exact(fuzzed, refs), "clean_s": round(clean_s, 3), "fuzzed_s": round(fuzzed_s, 3),
            "ratio": round(fuzzed_s / clean_s, 2), "within_2x": fuzzed_s <= 2 * clean_s,
            "datagrams": sent[0], "gap_s": args.fuzz_gap, "switch_drops": drops,
            "held": _exact(clean, refs) and _exact(fuzzed, refs) and fuzzed_s <= 2 * clean_s}


def forged_results(args: argparse.Namespace) -> dict:
    n, k = 2, args.iterations
    codec, xs, refs = _workload(n, args.elements, 2, k)
    base, W = 1000, 16
    rounds = k * (-(-args.elements // 256) // W + 2)
    forged = []
    for mt, lb, pay in ((lay.MsgType.RESULT, 8, b"\xff" * 256),
                        (lay.MsgType.NORM_RESULT, 32, b"\x7f" * 128)):
        for s in range(W):
            for r in range(base, base + rounds):
                h = wire.Header(msg_type=mt, job_id=1, slot=s, round=r, slot_set=r & 1,
                                lane_bits=lb, rank=lay.RANK_ALL, count=n, bitmap=(1 << n) - 1,
                                elem_count=256)
                forged.append(wire.pack_header(h) + pay)
    with EmbeddedNetwork(n, num_slots=W) as net:
        aggs = _aggs(net, base)
        stop = threading.Event()
        sent = [0]

        def flood() -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.99", 0))
                targets = [a.ep.address for a in aggs]
                while not stop.is_set():
                    for d in forged:
                        for t in targets:
                            with contextlib.suppress(OSError):
                                s.sendto(d, t)
                                sent[0] += 1
                        if stop.is_set():
                            break

        th = threading.Thread(target=flood, daemon=True)
        th.start()
        got = _allreduces(aggs, xs, codec, k)
        stop.set()
        th.join(5)
        foreign = [a.window.stats.foreign_results for a in aggs]
        _close(aggs)
    return {"workers": n, "allreduces": k, "exact": _exact(got, refs), "forged": sent[0],
            "foreign_results": foreign, "held": _exact(got, refs),
            "errors": [repr(g)[:200] for g in got if isinstance(g, BaseException)]}


def far_future_rounds(args: argparse.Namespace) -> dict:
    n = 3
    codec = THCCodec()
    xs = _data(n, 16 * 256, 3)
    refs = [simulated_allreduce(codec, xs, round=i).average for i in range(3)]
    with EmbeddedNetwork(n, num_slots=16) as net:
        base = session_round_base()
        aggs = _aggs(net, base, SlotConfig(give_up=args.give_up))
        # two all-reduces: both copies of every slot used hold a round (base, base + 1)
        first = _run(aggs, lambda i: [aggs[i].allreduce(xs[i], codec) for _ in range(2)])
        before = net.status()[0].counters["ingress.drops"]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((net.address(0).ip, 0))            # rank 0's address, another UDP port
            for token in (0, net.token):
                for i in range(32):
                    # 2^30 rounds ahead of the copies the next all-reduce uses (round base + 2,
                    # no START): DATA into its 16 slots, NORM into slot 0 (one norm packet)
                    norm = i >= 16
                    lo, hi = lay.round_fields(base + (1 << 30) + 2 * i)
                    h = wire.Header(msg_type=lay.MsgType.NORM if norm else lay.MsgType.DATA,
                                    job_id=net.job_id, rank=0, slot=0 if norm else i, round=lo,
                                    round_hi=hi,
                                    lane_bits=32 if norm else 4, token=token)
                    s.sendto(wire.pack_header(h) + bytes(128), net.address(0).switch)
        time.sleep(0.2)
        after = net.status()[0].counters["ingress.drops"]
        t0 = time.monotonic()
        got = _run(aggs, lambda i: aggs[i].allreduce(xs[i], codec))
        took = time.monotonic() - t0
        _close(aggs)
        errs = [g for g in got if isinstance(g, BaseException)]

    def dropped(reason: lay.DropReason) -> int:
        return after.get(int(reason), 0) - before.get(int(reason), 0)

    return {"workers": n, "spoofed": 64, "stalled": bool(errs), "seconds": round(took, 2),
            "dropped_bad_sender": dropped(lay.DropReason.BAD_SENDER),
            "dropped_ahead": dropped(lay.DropReason.AHEAD),
            "exact": _exact([next((x for x in (a, b) if isinstance(x, BaseException)), [*a, b])
                             for a, b in zip(first, got, strict=True)], refs),
            "error": repr(errs[0])[:240] if errs else None,
            "timeouts": sum(isinstance(e, SlotTimeoutError) for e in errs),
            "held": not errs,
            "mitigation": "the per-job token (BAD_SENDER) and the round window (AHEAD): "
                          "docs/security.md"}


def _cli_apply(path: Path, state_dir: str) -> str | None:
    """``netco controller apply PATH`` as an operator runs it (a subprocess of the real command,
    token state in ``state_dir``); None, or its error output when it failed."""
    env = {**os.environ, ENV_STATE_DIR: state_dir,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    p = subprocess.run([sys.executable, "-m", "control_plane.cli.main", "controller", "apply",
                        str(path)], env=env, cwd=REPO, capture_output=True, text=True,
                       timeout=120, check=False)
    return None if p.returncode == 0 else f"exit {p.returncode}: {p.stderr.strip()[-400:]}"


def switch_restarts(args: argparse.Namespace) -> dict:
    """``--restarts`` restarts while the workers all-reduce: the job runs until the last restart
    is two all-reduces behind it (at most ``60 * restarts + 4`` all-reduces), so that a fast
    machine does not finish before every restart has happened. Each restart is recovered by
    ``netco controller apply FILE`` (:func:`_cli_apply`), never by handing the controller the
    workers' token."""
    n = 3
    k_max = args.restarts * 60 + 4
    codec = THCCodec()
    xs = _data(n, args.elements, 4)
    with tempfile.TemporaryDirectory(prefix="netco-chaos-state-") as state, \
            EmbeddedNetwork(n, num_slots=32) as net:
        # the operator's first apply: nothing to write, the installed token is persisted
        failed = _cli_apply(net.config_path, state)
        if failed:
            raise RuntimeError(f"netco controller apply {net.config_path}: {failed}")
        apply_errors: list[str] = []
        aggs = _aggs(net, 1, SlotConfig(give_up=60.0, max_rto=0.2))
        done = [0] * n
        stop_at = [k_max]      # the chaos thread sets it once the restarts are done
        finished = threading.Event()
        count = [0]
        took: list[float] = []

        def chaos() -> None:
            while count[0] < args.restarts and not finished.is_set():
                if max(done) <= k_max - 3 and min(done) >= 1:
                    t0 = time.monotonic()
                    net.restart_switch(apply=False)          # empty: no pipeline, no entries
                    failed = _cli_apply(net.config_path, state)
                    if failed:
                        apply_errors.append(failed)
                    took.append(time.monotonic() - t0)
                    count[0] += 1
                    time.sleep(random.uniform(0.02, 0.3))
                else:
                    time.sleep(0.01)
            # all-reduces are collective: every worker stops at the same count, beyond any
            # worker's count now (they differ by at most one)
            stop_at[0] = min(k_max, max(done) + 2)

        def work(i: int) -> list:
            out = []
            while done[i] < stop_at[0]:
                out.append(aggs[i].allreduce(xs[i], codec))
                done[i] += 1
            return out

        th = threading.Thread(target=chaos, daemon=True)
        th.start()
        t0 = time.monotonic()
        got = _run(aggs, work, timeout=args.restarts * 60 + 120)
        seconds = time.monotonic() - t0
        finished.set()
        th.join(120)
        repairs = [a.window.stats.repairs for a in aggs]
        _close(aggs)
    errs = [g for g in got if isinstance(g, BaseException)]
    k = max((len(g) for g in got if not isinstance(g, BaseException)), default=0)
    refs = [simulated_allreduce(codec, xs, round=i).average for i in range(k)]
    return {"workers": n, "allreduces": k, "restarts": count[0], "deadlocks": len(errs),
            "exact": _exact(got, refs), "seconds": round(seconds, 1),
            "restart_s_median": round(statistics.median(took), 2) if took else None,
            "recovery": "netco controller apply FILE (subprocess, token state file)",
            "held": not errs and not apply_errors and count[0] == args.restarts
            and _exact(got, refs),
            "repairs": repairs,
            "errors": [repr(e)[:200] for e in errs] + [f"apply: {e}" for e in apply_errors]}


def _dead_rank_pairs(new_aggs, encs: list, codec: THCCodec, vals: list, n: int, packets: int,
                     repeats: int) -> dict:
    """The dead-rank protocol on any target: ``repeats`` alternating healthy and dead-rank pairs
    of aggregators from ``new_aggs(ranks)`` (fresh windows and round bases each call); each dead
    run is measured after its first deadline (a first exchange in the same windows learns the
    suspect). Medians, every run, and the asking ranks' window statistics.

    Each dead exchange's sums are checked (and let go) before the next exchange starts: kept
    alive, they made every later exchange allocate fresh pages, which the measured dead run
    paid and the healthy one (its results dropped) did not."""
    healthy, firsts, dead, st, gains, srtts = [], [], [], [], [], []
    sent_h, sent_d = [], []      # datagrams to the switch in the measured exchanges
    live = sum(vals[: n - 1])
    exact, full, errors = [True], [], []

    def sent(aggs: list) -> int:
        return sum(a.window.stats.packets for a in aggs)

    def check(got: list) -> None:
        """Every sum over the live ranks exact where the count says all of them are in."""
        for g in got:
            if isinstance(g, BaseException):
                exact[0] = False
                errors.append(repr(g)[:160])
                continue
            sums, count = g
            c = count.numpy() if isinstance(count, torch.Tensor) else np.full(sums.numel(), count)
            m = c == n - 1
            full.append(float(m.mean()))
            exact[0] &= bool((sums.numpy().astype(np.int64)[m] == live[m]).all())

    for _ in range(repeats):
        aggs = new_aggs(range(n))
        _run(aggs, lambda i, aggs=aggs: aggs[i].sum_encoded(encs[i], codec))       # warm-up (RTT)
        s0, t0 = sent(aggs), time.monotonic()
        _run(aggs, lambda i, aggs=aggs: aggs[i].sum_encoded(encs[i], codec))
        healthy.append(time.monotonic() - t0)
        sent_h.append(sent(aggs) - s0)
        _close(aggs)
        aggs = new_aggs(range(n - 1))                                       # rank 3 is dead
        t0 = time.monotonic()
        got = _run(aggs, lambda i, aggs=aggs: aggs[i].sum_encoded(encs[i], codec))
        firsts.append(time.monotonic() - t0)
        check(got)
        del got
        s0, t0 = sent(aggs), time.monotonic()
        got = _run(aggs, lambda i, aggs=aggs: aggs[i].sum_encoded(encs[i], codec))
        dead.append(time.monotonic() - t0)
        sent_d.append(sent(aggs) - s0)
        check(got)
        del got
        st += [a.window.stats for a in aggs]
        gains.append(aggs[0].window.gain)
        srtts.append(aggs[0].window.srtt or 0.0)
        _close(aggs)
    exact = exact[0]
    h, d = statistics.median(healthy), statistics.median(dead)
    return {"healthy_s": round(h, 3), "healthy_pkt_s": round(packets / h),
            "first_with_dead_s": round(statistics.median(firsts), 3),
            "after_first_deadline_s": round(d, 3), "dead_pkt_s": round(packets / d),
            "ratio": round(d / h, 2), "within_2x": d <= 2 * h,
            "healthy_s_runs": [round(x, 3) for x in healthy],
            "after_first_deadline_s_runs": [round(x, 3) for x in dead],
            "ratio_runs": [round(y / x, 2) for x, y in zip(healthy, dead, strict=True)],
            "exact_where_full": exact, "held": exact and d <= 2 * h,
            "full_count_fraction": round(min(full), 3) if full else None,
            "fast_deadlines": sum(s.fast_deadlines for s in st),
            "deadlines": sum(s.deadlines for s in st),
            "deadlines_by_rank": [sum(s.deadlines for s in st[r::n - 1]) for r in range(n - 1)],
            "retransmits": sum(s.retransmits for s in st),
            # every datagram the workers sent (first sends, retransmissions, DEADLINE requests)
            "healthy_sent": round(statistics.median(sent_h)),
            "after_first_deadline_sent": round(statistics.median(sent_d)),
            "asking_rank_gain_runs": [round(x, 2) for x in gains],
            "asking_rank_srtt_ms_runs": [round(1000 * x, 3) for x in srtts],
            "errors": errors[:3]}


#: the desired-state file the BMv2 variant of ``dead_rank_partial`` applies (its job is made
#: partial-policy with the software target's 64 slots)
DEAD_RANK_TOPOLOGY = REPO / "mininet" / "rack.yaml"


@contextlib.contextmanager
def _controller_watch(raw: dict, tb, dead_after: float, tmp: str):
    """``netco controller apply FILE --watch 0.2 --dead-after dead_after --json`` on the
    testbed's file (its switches' addresses and target) while the block runs; yields a dict
    that gets the watch's rank changes and rounds (``None`` when ``dead_after`` is 0)."""
    if not dead_after:
        yield None
        return
    import yaml

    eff = {**raw, "switches": [dict(s, address=e.address, target=e.target)
                               for s, e in zip(raw["switches"], tb.cfg_eff.switches, strict=True)]}
    path = Path(tmp) / "watched.yaml"
    path.write_text(yaml.safe_dump(eff, sort_keys=False))
    env = dict(os.environ, **{ENV_STATE_DIR: str(Path(tmp) / "watch-state")})
    proc = subprocess.Popen([sys.executable, "-m", "control_plane.cli.main", "controller",
                             "apply", str(path), "--watch", "0.2", "--dead-after",
                             str(dead_after), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    out: dict = {"dead_after_s": dead_after, "changes": [], "rounds": 0, "failed_rounds": 0}

    def read() -> None:      # as the lines come: a full pipe would stop the watch's rounds
        for line in proc.stdout:
            with contextlib.suppress(ValueError):
                r = json.loads(line)
                out["rounds"] += 1
                out["failed_rounds"] += not all(sw["ok"] for sw in r["switches"])
                out["changes"] += r.get("ranks", [])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield out
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
        reader.join(10)
        if not out["rounds"]:
            out["error"] = stderr.strip().splitlines()[-1][:200] if stderr.strip() else "no round"


def _dead_rank_bmv2(args: argparse.Namespace, n: int, slots_n: int, deadline: float) -> dict:
    """The dead-rank protocol on BMv2, as a user runs it: ``netco testbed``'s Mininet rack
    (:class:`control_plane.testbed.net.Testbed`, target ``bmv2``: ``simple_switch_grpc``
    started by the testbed, the controller applying the desired-state file over P4Runtime)
    of ``mininet/rack.yaml`` with its job made partial-policy with ``slots_n`` slots; workers
    are :class:`NetworkAggregator` threads on raw endpoints opened in the hosts (what
    ``TestbedWorkloads.allreduce`` does), with the testbed's slot timing
    (:meth:`~control_plane.testbed.workload.TestbedWorkloads.slot_config`: on unimpaired links
    the software target's, rto 0.02 s, max_rto 0.5 s) and the same ``deadline``.
    ``{"skipped": reason}`` (one line: what to install) when BMv2, the program, Mininet or
    root is missing.

    With ``--dead-watch D`` the controller watches the switch's per-rank counters while the
    pairs run, as an operator runs it: ``netco controller apply FILE --watch 0.2 --dead-after
    D`` (a subprocess, on the testbed's file); its rank changes are reported under
    ``"watch"``."""
    import yaml

    from control_plane.config import load_config
    from control_plane.testbed.net import Testbed, with_free_ports
    from control_plane.testbed.targets import TestbedError, choose_target

    packets = args.dead_bmv2_packets
    with tempfile.TemporaryDirectory(prefix="netco-chaos-bmv2-") as tmp:
        raw = yaml.safe_load(DEAD_RANK_TOPOLOGY.read_text())
        if len(raw["jobs"][0]["members"]) != n:
            raise RuntimeError(f"{DEAD_RANK_TOPOLOGY}: its job must have {n} members")
        raw["jobs"][0].update(policy="partial", num_slots=slots_n)
        path = Path(tmp) / "rack-partial.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        cfg = with_free_ports(load_config(path))
        try:
            choose_target("bmv2", cfg.controller.bmv2_json, flag="--dead-target")
            if os.geteuid() != 0:
                raise TestbedError("the BMv2 rack needs root (network namespaces, raw sockets); "
                                   "run as root or use --dead-target softswitch")
            tb = Testbed(cfg, target="bmv2", tag=f"cd{os.getpid() % 1000:03d}", workdir=tmp)
            t0 = time.monotonic()
            tb.up()
        except TestbedError as exc:
            return {"skipped": str(exc).splitlines()[0]}
        try:
            up_s = time.monotonic() - t0
            jb = tb.job()
            codec = tb.codec(jb)
            slots = tb.slot_config(jb, deadline=deadline)
            encs = encode_workers(codec, _data(n, packets * 256, 5))
            vals = table_values(codec, encs)
            base = [1]                        # a fresh switch, as on the software target

            def new_aggs(ranks: range) -> list[NetworkAggregator]:
                spec = dict(job_id=jb.id, world=n, num_slots=jb.num_slots,
                            granularity=jb.thc.g, lane_bits=jb.lane_bits,
                            token=tb.tokens.get(jb.id, 0), round_base=base[0])
                base[0] += 1 << 20             # every session above the last one's rounds
                return [NetworkAggregator(tb.endpoint(jb.members[r], jb.worker_port),
                                          JobSpec(rank=r, **spec),
                                          slots) for r in ranks]

            out = {"target": "bmv2", "workers": n, "packets": packets,
                   "deadline_s": slots.deadline, "rto_s": slots.rto, "max_rto_s": slots.max_rto,
                   "num_slots": jb.num_slots, "lane_bits": jb.lane_bits,
                   "repeats": args.dead_repeats, "testbed_up_s": round(up_s, 2)}
            with _controller_watch(raw, tb, args.dead_watch, tmp) as watch:
                out.update(_dead_rank_pairs(new_aggs, encs, codec, vals, n, packets,
                                            args.dead_repeats))
            if watch is not None:
                out["watch"] = watch
            drops = tb.counters()[cfg.switches[0].name]["ingress.drops"]
            out["switch_drops"] = {lay.DropReason(i).name: c for i, c in sorted(drops.items()) if c}
            return out
        finally:
            tb.down()


def dead_rank_partial(args: argparse.Namespace) -> dict:
    """Healthy and dead-rank runs alternate ``--dead-repeats`` times (fresh windows and round
    bases each time, one switch); each dead run is measured after its first deadline (a first
    exchange in the same windows learns the suspect). Medians, and every run. On the software
    target (the default) and/or BMv2 (``--dead-target``; its numbers under ``"bmv2"``)."""
    n, packets = 4, args.dead_packets
    slots = SlotConfig(policy="partial", deadline=0.5)
    out: dict = {}
    held: list[bool] = []
    if args.dead_target in ("softswitch", "both"):
        codec = THCCodec()
        encs = encode_workers(codec, _data(n, packets * 256, 5))
        vals = table_values(codec, encs)
        out.update({"workers": n, "packets": packets, "deadline_s": slots.deadline,
                    "repeats": args.dead_repeats})
        with EmbeddedNetwork(n, num_slots=64) as net:
            base = [1]

            def new_aggs(ranks: range) -> list[NetworkAggregator]:
                aggs = _aggs(net, base[0], slots, ranks=ranks)
                base[0] += 1 << 20             # every session above the last one's rounds
                return aggs

            out.update(_dead_rank_pairs(new_aggs, encs, codec, vals, n, packets,
                                        args.dead_repeats))
        out["before_per_packet_deadline_s"] = round(packets / 64 * slots.deadline, 1)
        held.append(out["held"])
    if args.dead_target in ("bmv2", "both"):
        out["bmv2"] = _dead_rank_bmv2(args, n, 64, slots.deadline)
        if "held" in out["bmv2"]:                 # skipped: nothing measured, nothing claimed
            held.append(out["bmv2"]["held"])
    out["held_targets"] = [t for t in ("softswitch", "bmv2")
                           if (t == "softswitch" and "ratio" in out) or
                           (t == "bmv2" and "held" in out.get("bmv2", {}))]
    out["held"] = bool(held) and all(held)
    return out


def idle_streams(args: argparse.Namespace) -> dict:
    import grpc
    from finsy.proto import p4r, p4r_grpc

    with EmbeddedNetwork(2, num_slots=8) as net:
        addr = f"127.0.0.1:{net.grpc_port}"
        ch = grpc.insecure_channel(addr)
        stub = p4r_grpc.P4RuntimeStub(ch)
        stop = threading.Event()
        opened = [0]

        def idle() -> None:
            """Keep ``--streams`` streams open that never arbitrate; reopen each one closed."""
            def reqs():
                stop.wait(120)    # never arbitrate: hold the stream idle
                return
                yield p4r.StreamMessageRequest()

            live: list = []
            while not stop.is_set():
                live = [c for c in live if c.is_active()]
                while len(live) < args.streams and not stop.is_set():
                    live.append(stub.StreamChannel(reqs()))
                    opened[0] += 1
                stop.wait(0.05)
            for c in live:
                c.cancel()

        th = threading.Thread(target=idle, daemon=True)
        th.start()
        time.sleep(1.0)
        t0 = time.monotonic()
        try:
            res = run_sync(Controller(net.config, timeout=10).status())
            ok = all(r.ok for r in res)
            err = None
        except Exception as exc:   # reported: the measurement is whether it answers
            ok, err = False, repr(exc)[:200]
        took = time.monotonic() - t0
        stop.set()
        th.join(10)
        ch.close()
    return {"streams": args.streams, "opened": opened[0], "answered": ok,
            "status_s": round(took, 2), "error": err, "held": ok}


# -- issue 33: what a faulty member and a hostile neighbour can still do --------------------
def _contribution(net: EmbeddedNetwork, slot: int, rnd: int, norm: bool, flags: int = 0,
                  rank: int = 0, token: int | None = None, values: int | None = None) -> bytes:
    """A DATA (indices, or values-uplink lanes of ``values``) or NORM contribution of ``rank``
    in the 48-bit round ``rnd``."""
    lo, hi = lay.round_fields(rnd)
    if norm:
        h = wire.Header(msg_type=lay.MsgType.NORM, job_id=net.job_id, rank=rank, slot=slot,
                        round=lo, round_hi=hi, slot_set=rnd & 1, lane_bits=32, flags=flags,
                        elem_count=lay.NORMS_PER_PACKET,
                        token=net.token if token is None else token)
        return wire.pack_header(h) + bytes(lay.NORMS.nbytes)
    bits = lay.INDEX_BITS if values is None else lay.VALUE_BITS
    h = wire.Header(msg_type=lay.MsgType.DATA, job_id=net.job_id, rank=rank, slot=slot,
                    round=lo, round_hi=hi, slot_set=rnd & 1, lane_bits=bits, flags=flags,
                    elem_count=lay.COORDS_PER_PACKET, token=net.token if token is None else token)
    pay = (bytes(lay.COORDS_PER_PACKET // 2) if values is None
           else bytes([values]) * lay.COORDS_PER_PACKET)
    return wire.pack_header(h) + pay


def _drops(net: EmbeddedNetwork) -> dict[int, int]:
    return dict(net.status()[0].counters.get("ingress.drops", {}))


def _spoof_starts(net: EmbeddedNetwork, aggs: list) -> int:
    """From rank 0's address on another (ephemeral) UDP port, with the job's token: START
    contributions 2^30 rounds ahead into every slot copy, data and norm (issue 33, 1); the
    number sent."""
    W = net.num_slots
    nxt = {k: aggs[0].window.next_round[k].copy() for k in ("data", "norm")}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((net.address(0).ip, 0))           # rank 0's address, another UDP port
        for slot in range(W):
            for k in (0, 1):                      # both copies, data and norm
                for norm in (False, True):
                    far = int(nxt["norm" if norm else "data"][slot]) + (1 << 30) + k
                    s.sendto(_contribution(net, slot, far, norm, flags=int(lay.Flag.START)),
                             net.address(0).switch)
    time.sleep(0.2)
    return 4 * W


def start_flood(args: argparse.Namespace) -> dict:
    from host.transport.session import ThreadAgreement, start_session

    n, W = 3, 16
    codec = THCCodec()
    xs = _data(n, W * 256, 6)
    ref = simulated_allreduce(codec, xs, round=0).average
    slots = SlotConfig(policy="partial", deadline=0.2, give_up=args.give_up)
    with EmbeddedNetwork(n, num_slots=W) as net:
        base = session_round_base() & ~1
        aggs = _aggs(net, base, slots)
        first = _run(aggs, lambda i: aggs[i].allreduce(xs[i], codec))
        spoofed = _spoof_starts(net, aggs)
        t0 = time.monotonic()
        during = _run(aggs, lambda i: aggs[i].allreduce(xs[i], codec), timeout=args.give_up * 4 + 30)
        returned_s = time.monotonic() - t0
        hung = sum(isinstance(g, TimeoutError) and str(g) == "hung" for g in during)
        # the next session, opened as attach opens it
        agree = ThreadAgreement(n, timeout=60.0)
        cands = _run(aggs, lambda i: start_session(aggs[i], base + (1 << 20), slots, agree))
        after = _run(aggs, lambda i: aggs[i].allreduce(xs[i], codec))
        _close(aggs)
    exact_after = _exact([[a] if not isinstance(a, BaseException) else a for a in after],
                         [simulated_allreduce(codec, xs, round=1).average])
    bound = args.give_up * 2 + 5
    return {"workers": n, "spoofed": spoofed, "policy": "partial", "give_up_s": args.give_up,
            "returned_s": round(returned_s, 2), "hung": hung,
            "errors_during": [repr(g)[:160] for g in during if isinstance(g, BaseException)][:3],
            "exact_before": _exact([[g] if not isinstance(g, BaseException) else g
                                    for g in first], [ref]),
            "next_session": [c if not isinstance(c, BaseException) else repr(c)[:160]
                             for c in cands],
            "exact_after": exact_after,
            "held": hung == 0 and returned_s <= bound and exact_after}


def sender_port(args: argparse.Namespace) -> dict:
    """The start flood of :func:`start_flood` against a job installed with a ``worker_port``
    (its workers bound to it): the sender bindings name the port, so the spoofed STARTs from
    rank 0's address on another port are dropped as BAD_SENDER and the all-reduce after them
    is exact, without a give-up."""
    n, W = 3, 16
    codec = THCCodec()
    xs = _data(n, W * 256, 9)
    slots = SlotConfig(policy="partial", deadline=0.2, give_up=args.give_up)
    with EmbeddedNetwork(n, num_slots=W, job={"policy": "partial"}, worker_port=None) as net:
        port = net.worker_port
        aggs = _aggs(net, session_round_base() & ~1, slots)
        first = _run(aggs, lambda i: aggs[i].allreduce(xs[i], codec))
        before = _drops(net).get(int(lay.DropReason.BAD_SENDER), 0)
        spoofed = _spoof_starts(net, aggs)
        t0 = time.monotonic()
        during = _run(aggs, lambda i: aggs[i].allreduce(xs[i], codec), timeout=args.give_up * 4 + 30)
        took = time.monotonic() - t0
        dropped = _drops(net).get(int(lay.DropReason.BAD_SENDER), 0) - before
        _close(aggs)
    exact = _exact([[g] if not isinstance(g, BaseException) else g for g in during],
                   [simulated_allreduce(codec, xs, round=1).average])
    return {"workers": n, "worker_port": port, "spoofed": spoofed,
            "dropped_bad_sender": dropped, "allreduce_s": round(took, 2),
            "exact_before": _exact([[g] if not isinstance(g, BaseException) else g
                                    for g in first],
                                   [simulated_allreduce(codec, xs, round=0).average]),
            "exact_during": exact,
            "errors": [repr(g)[:160] for g in during if isinstance(g, BaseException)][:3],
            "mitigation": "the sender binding names the job's worker_port (sender.udp_port)",
            "held": exact and dropped >= spoofed}


def replay(args: argparse.Namespace) -> dict:
    from host.transport.session import ThreadAgreement, start_session

    n, W = 2, 8
    codec = THCCodec()
    xs = _data(n, W * 256, 7)
    slots = SlotConfig(give_up=args.give_up)
    with EmbeddedNetwork(n, num_slots=W) as net:
        s1 = session_round_base() & ~1
        aggs = _aggs(net, s1, slots)
        agree = ThreadAgreement(n, timeout=60.0)
        c1 = _run(aggs, lambda i: start_session(aggs[i], s1, slots, agree))
        _run(aggs, lambda i: aggs[i].allreduce(xs[i], codec))
        # what a capture of session 1 holds: its START contributions on every copy, with the token
        captured = [_contribution(net, slot, c + k, norm, flags=int(lay.Flag.START), rank=r)
                    for c in {x for x in c1 if isinstance(x, int)}
                    for slot in range(W) for k in (0, 1) for norm in (False, True)
                    for r in range(n)]
        s2 = (s1 + (1 << 31) + 2) & ~1 & lay.ROUND_MASK
        agree = ThreadAgreement(n, timeout=60.0)
        c2 = _run(aggs, lambda i: start_session(aggs[i], s2, slots, agree))
        before = _drops(net)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((net.address(0).ip, 0))
            for d in captured:
                s.sendto(d, net.address(0).switch)
        time.sleep(0.2)
        got = _run(aggs, lambda i: aggs[i].allreduce(xs[i], codec))
        after = _drops(net)
        _close(aggs)
    exact = _exact([[g] if not isinstance(g, BaseException) else g for g in got],
                   [simulated_allreduce(codec, xs, round=1).average])

    def show(c: object) -> object:
        return c if isinstance(c, int) else repr(c)[:160]

    def dropped(why: lay.DropReason) -> int:
        return after.get(int(why), 0) - before.get(int(why), 0)

    # rank 0's replays are STALE; rank 1's, sent from rank 0's address, BAD_SENDER first
    stale, bad = dropped(lay.DropReason.STALE), dropped(lay.DropReason.BAD_SENDER)
    first = all(c == s2 for c in c2)        # no copy was reopened ahead of session 2's base
    return {"workers": n, "replayed": len(captured), "session_1": show(c1[0]),
            "session_2": [show(c) for c in c2], "session_2_first_candidate": first,
            "dropped_stale": stale, "dropped_bad_sender": bad, "exact": exact,
            "held": exact and first and stale + bad >= len(captured)}


def cross_job(args: argparse.Namespace) -> dict:
    from host.softswitch.launch import UdpSwitch

    ips = ["127.0.0.31", "127.0.0.32"]
    codec = THCCodec()
    xs = _data(2, args.elements, 8)
    with tempfile.TemporaryDirectory(prefix="netco-chaos-") as tmp:
        sw = UdpSwitch(Path(tmp), 2).start()
        try:
            ctl = jobs_sharing_hosts(sw.address, ips)
            aggs = [NetworkAggregator(UdpEndpoint(("127.0.0.1", sw.ports[r + 1]), bind=(ips[r], 0)),
                                      JobSpec(1, r, 2, num_slots=16, token=ctl.tokens[1],
                                              round_base=1000), SlotConfig(give_up=10.0))
                    for r in range(2)]
            peek = wire.norm_status_request(2, 0, ctl.tokens[2])
            b0 = UdpEndpoint(("127.0.0.1", sw.ports[1]), bind=(ips[0], 0))
            with sending_alongside(b0, peek) as answered:
                t0 = time.monotonic()
                got = _allreduces(aggs, xs, codec, args.iterations)
                took = time.monotonic() - t0
            b0.close()
            retx = sum(a.window.stats.retransmits for a in aggs)
            _close(aggs)
        finally:
            sw.stop()
    refs = [simulated_allreduce(codec, xs, round=i).average for i in range(args.iterations)]
    exact = _exact(got, refs)
    return {"jobs": 2, "allreduces": args.iterations, "seconds": round(took, 2),
            "peeks_answered": answered[0], "retransmits": retx, "exact": exact,
            "held": exact and answered[0] > 0 and retx < 50 * args.iterations}


_FLOODER = """
import json, select, socket, sys, time
ip, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
wrong, right, rate = bytes.fromhex(sys.argv[4]), bytes.fromhex(sys.argv[5]), float(sys.argv[6])
t0 = time.monotonic()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((ip, 0))
s.setblocking(False)
sent = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    ahead = sent / rate - (time.monotonic() - t0) if rate > 0 else 0
    if ahead > 0:
        time.sleep(ahead)
    for _ in range(64):
        try:
            s.sendto(wrong, (host, port))
            sent += 1
        except BlockingIOError:
            break
    try:
        while True:
            s.recv(4096)
    except BlockingIOError:
        pass
s.sendto(right, (host, port))
end, ok = time.monotonic() + 0.5, False
while time.monotonic() < end and not ok:
    if select.select([s], [], [], 0.05)[0]:
        ok = bool(s.recv(4096)[2] & 0x08)
print(json.dumps({"sent": sent, "confirmed": ok}))
"""


def _flooded_allreduces(net: EmbeddedNetwork, flood: bytes, last: bytes, rate: float,
                        xs: list, codec: THCCodec, k: int) -> tuple[list, float, dict]:
    """``k`` all-reduces (as :func:`_timed_allreduces`, round base 2^20) while one process
    (:data:`_FLOODER`; no interpreter lock shared with the workers) sends ``flood`` from rank
    0's address at ``rate`` per second (0: as fast as it goes), then ``last`` from the same
    socket: the results, their seconds and the flooder's ``{"sent", "confirmed"}``."""
    host, port = net.address(0).switch
    fl = subprocess.Popen([sys.executable, "-c", _FLOODER, net.address(0).ip, host, str(port),
                           flood.hex(), last.hex(), str(rate)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        got, seconds = _timed_allreduces(net, 1 << 20, xs, codec, k)
        out, _ = fl.communicate("stop\n", timeout=30)
    finally:
        if fl.poll() is None:
            fl.kill()
    return got, seconds, json.loads(out.strip().splitlines()[-1])


def token_flood(args: argparse.Namespace) -> dict:
    """One process (not a thread of the workers' process: no shared interpreter lock) floods
    wrong-token status requests from a member's address as fast as it can, then sends the
    right one from the same socket: it must go unanswered while the socket is held."""
    n, k = 2, args.iterations
    codec, xs, refs = _workload(n, args.elements, 9, k)
    with EmbeddedNetwork(n, num_slots=32) as net:
        clean, clean_s = _timed_allreduces(net, 1, xs, codec, k)
        wrong = wire.norm_status_request(net.job_id, 0, net.token ^ 0x5A5A)
        right = wire.norm_status_request(net.job_id, 0, net.token)
        flooded, flooded_s, res = _flooded_allreduces(net, wrong, right, args.flood_rate,
                                                      xs, codec, k)
    exact = _exact(clean, refs) and _exact(flooded, refs)
    ratio = flooded_s / clean_s
    return {"workers": n, "allreduces": k, "datagrams": res["sent"],
            "rate_per_s": args.flood_rate or "as fast as it goes",
            "clean_s": round(clean_s, 3), "flooded_s": round(flooded_s, 3),
            "ratio": round(ratio, 2), "exact": exact,
            "guess_confirmed_while_held": res["confirmed"],
            "held": exact and ratio <= 2 and not res["confirmed"]}


def port_flood(args: argparse.Namespace) -> dict:
    """``token_flood`` by a token holder: one process on rank 0's address floods status
    requests *with* the job's token from a port the job's ``worker_port`` binding does not
    name, during all-reduces. They fail validation (``BAD_SENDER``), so the rate limit holds
    the socket; before, the C loop's pre-filter knew only tokens, never counted them, and
    sent every batch they hit to the Python path."""
    n, k = 2, args.iterations
    codec, xs, refs = _workload(n, args.elements, 9, k)
    with EmbeddedNetwork(n, num_slots=32, worker_port=None) as net:
        port = net.worker_port
        clean, clean_s = _timed_allreduces(net, 1, xs, codec, k)
        before = _drops(net)
        peek = wire.norm_status_request(net.job_id, 0, net.token)
        flooded, flooded_s, res = _flooded_allreduces(net, peek, peek, args.flood_rate,
                                                      xs, codec, k)
        after = _drops(net)
    delta = {lay.DropReason(r).name: after.get(r, 0) - before.get(r, 0) for r in after
             if after.get(r, 0) != before.get(r, 0)}
    exact = _exact(clean, refs) and _exact(flooded, refs)
    ratio = flooded_s / clean_s
    limited = delta.get("RATE_LIMITED", 0)
    return {"workers": n, "allreduces": k, "worker_port": port, "datagrams": res["sent"],
            "rate_per_s": args.flood_rate or "as fast as it goes",
            "clean_s": round(clean_s, 3), "flooded_s": round(flooded_s, 3),
            "ratio": round(ratio, 2), "exact": exact, "drops": delta,
            "answered": res["confirmed"],
            "held": exact and ratio <= 2 and limited > 0 and not res["confirmed"]}


def values_above_g(args: argparse.Namespace) -> dict:
    n, W = 2, 16
    codec = THCCodec()
    xs = _data(n, W * 256, 10)
    refs = [simulated_allreduce(codec, xs, round=i).average for i in range(2)]
    with EmbeddedNetwork(n, num_slots=W) as net:
        aggs = _aggs(net, 1, SlotConfig(give_up=args.give_up))
        first = _run(aggs, lambda i: aggs[i].allreduce(xs[i], codec))
        nxt = aggs[0].window.next_round["data"].copy()
        before = _drops(net)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((net.address(0).ip, 0))           # rank 0's address, another port
            for slot in range(W):
                s.sendto(_contribution(net, slot, int(nxt[slot]), False, values=255),
                         net.address(0).switch)
        time.sleep(0.2)
        got = _run(aggs, lambda i: aggs[i].allreduce(xs[i], codec))
        after = _drops(net)
        _close(aggs)
    exact = _exact([[a, b] if not isinstance(b, BaseException) else b
                    for a, b in zip(first, got, strict=True)], refs)
    mal = after.get(int(lay.DropReason.MALFORMED), 0) - before.get(int(lay.DropReason.MALFORMED), 0)
    return {"workers": n, "forged": W, "dropped_malformed": mal, "exact": exact,
            "held": exact and mal == W}


def lapping_member(args: argparse.Namespace) -> dict:
    """Issue 33, 1: before each of ``--iterations`` all-reduces, a member (its address, another
    UDP port, the job's token) sends every slot copy the round after its next one (no
    ``START``), data and norm: obeyed, each reset the copy and the others' next rounds turned
    STALE until every rank gave up; dropped as AHEAD, the sums stay exact. (A lap repeated
    until the copy gets there would be that rank's own next contribution, which the switch
    cannot tell from an honest one: docs/security.md, "Members".)"""
    from host.transport.session import ThreadAgreement, start_session

    n, k, W = 3, args.iterations, 16
    codec, xs, refs = _workload(n, W * 256, 12, k)
    slots = SlotConfig(give_up=args.give_up)
    with EmbeddedNetwork(n, num_slots=W) as net:
        clean, clean_s = _timed_allreduces(net, 1, xs, codec, k)
        aggs = _aggs(net, 1 << 20, slots)
        # opened as attach opens a session: every copy, data and norm, holds a released round
        agree = ThreadAgreement(n, timeout=60.0)
        _run(aggs, lambda i: start_session(aggs[i], 1 << 20, slots, agree))
        before = _drops(net)
        sent, lapped, took = 0, [[] for _ in range(n)], 0.0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((net.address(0).ip, 0))           # rank 0's address, another port
            for _ in range(k):
                # every copy holds a released round; the next it takes is next_round's
                for kind, norm in (("data", False), ("norm", True)):
                    nxt = aggs[0].window.next_round[kind]
                    for slot in range(W):
                        for ahead in (2, 3):          # each copy's round after next
                            s.sendto(_contribution(net, slot, int(nxt[slot]) + ahead, norm),
                                     net.address(0).switch)
                            sent += 1
                time.sleep(0.05)
                t0 = time.monotonic()
                got = _run(aggs, lambda i: aggs[i].allreduce(xs[i], codec),
                           timeout=args.give_up * 4 + 30)
                took += time.monotonic() - t0
                for r, g in enumerate(got):
                    lapped[r].append(g)
        after = _drops(net)
        _close(aggs)
    errors = [g for r in lapped for g in r if isinstance(g, BaseException)]
    exact = _exact(clean, refs) and not errors and _exact(lapped, refs)
    ahead = after.get(int(lay.DropReason.AHEAD), 0) - before.get(int(lay.DropReason.AHEAD), 0)
    return {"workers": n, "allreduces": k, "laps_sent": sent, "dropped_ahead": ahead,
            "clean_s": round(clean_s, 3), "lapped_s": round(took, 3),
            "ratio": round(took / clean_s, 2), "exact": exact,
            "errors": [repr(g)[:160] for g in errors][:3],
            "held": exact and ahead == sent}


CLASSES = {"fuzz_member_addresses": fuzz_member_addresses, "forged_results": forged_results,
           "far_future_rounds": far_future_rounds, "switch_restarts": switch_restarts,
           "dead_rank_partial": dead_rank_partial, "idle_streams": idle_streams,
           "start_flood": start_flood, "replay": replay, "cross_job": cross_job,
           "token_flood": token_flood, "values_above_g": values_above_g,
           "lapping_member": lapping_member, "sender_port": sender_port,
           "port_flood": port_flood}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print the JSON object (the default output)")
    p.add_argument("--only", nargs="+", choices=sorted(CLASSES), help="run only these classes")
    p.add_argument("--restarts", type=int, default=20, help="switch restarts mid-job (default 20)")
    p.add_argument("--iterations", type=int, default=4,
                   help="all-reduces per run in the fuzz and forged-result classes (default 4)")
    p.add_argument("--elements", type=int, default=256 * 1024,
                   help="elements per all-reduce (default 262144)")
    p.add_argument("--fuzz-gap", type=float, default=0.002,
                   help="seconds between fuzz bursts (one datagram per member; default 0.002)")
    p.add_argument("--dead-packets", type=int, default=8192,
                   help="packets per worker in the dead-rank class (default 8192)")
    p.add_argument("--dead-repeats", type=int, default=5,
                   help="healthy/dead run pairs in the dead-rank class; medians (default 5)")
    p.add_argument("--dead-target", choices=("softswitch", "bmv2", "both"), default="softswitch",
                   help="where the dead-rank class runs: the software target (default), BMv2 "
                        "(netco testbed's Mininet rack, root; reported under \"bmv2\") or both")
    p.add_argument("--dead-watch", type=float, default=0.0, metavar="S",
                   help="BMv2 dead-rank runs: run the controller's watch beside them (netco "
                        "controller apply --watch 0.2 --dead-after S; default 0: without)")
    p.add_argument("--dead-bmv2-packets", type=int, default=2048,
                   help="packets per worker in the dead-rank class on BMv2 (default 2048: "
                        "BMv2 forwards a few thousand packets/s)")
    p.add_argument("--give-up", type=float, default=5.0,
                   help="give-up (s) in the far-future, start-flood, replay and values classes "
                        "(default 5)")
    p.add_argument("--flood-rate", type=float, default=31000.0,
                   help="wrong-token datagrams per second in the token-flood class (default "
                        "31000, the hostile probe's rate; 0: as fast as one process sends)")
    p.add_argument("--streams", type=int, default=40,
                   help="idle P4Runtime streams, reopened as they close (default 40)")
    p.add_argument("--busy", type=int, default=0, metavar="N",
                   help="run N busy-looping processes beside every class (a loaded machine: "
                        "the issue's load average ~10 is --busy 10 on 2 cores); each class "
                        "reports the load average it ran under (default 0: none)")
    p.add_argument("--busy-warm", type=float, default=60.0, metavar="S",
                   help="with --busy: seconds the busy processes run before the first class, "
                        "for the 1-minute load average to rise (default 60)")
    args = p.parse_args(argv)
    if args.busy < 0:
        p.error(f"--busy={args.busy}: give a number of processes >= 0")
    if not 0 <= args.busy_warm < float("inf"):
        p.error(f"--busy-warm={args.busy_warm}: give a number of seconds >= 0")
    if not (args.dead_watch >= 0 and args.dead_watch < float("inf")):
        p.error(f"--dead-watch={args.dead_watch}: give a number of seconds >= 0")
    for name in ("restarts", "iterations", "elements", "dead_packets", "dead_repeats",
                 "dead_bmv2_packets", "streams"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)}: must be >= 1")
    out = {}
    with _busy(args.busy, args.busy_warm):
        for name in args.only or CLASSES:
            print(f"chaos: {name} ...", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            out[name] = CLASSES[name](args)
            out[name]["class_s"] = round(time.monotonic() - t0, 1)
            if args.busy:
                out[name]["busy"] = args.busy
                out[name]["load_average_1min"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=1))
    return 0


@contextlib.contextmanager
def _busy(n: int, warm: float = 60.0):
    """``n`` processes that only spin, for the length of the block (ended by PID); waits
    ``warm`` seconds first so that the 1-minute load average has risen."""
    if n == 0:
        yield
        return
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        print(f"chaos: {n} busy processes; {warm:g} s for the load to rise", file=sys.stderr,
              flush=True)
        time.sleep(warm)
        yield
    finally:
        for pr in procs:
            pr.kill()
        for pr in procs:
            pr.wait()


if __name__ == "__main__":
    sys.exit(main())
