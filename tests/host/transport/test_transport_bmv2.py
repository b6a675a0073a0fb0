"""In-network THC all-reduce through BMv2 over raw sockets in network namespaces (root).

The switch is ``simple_switch_grpc`` running ``p4/build/netco.json``, started and programmed
over P4Runtime by the packet suite's helper (``tests/support/aggnet.py``: one BMv2 with
hosts w0..w7 in their own network namespaces behind veth pairs, shared by the module). Workers
are the real host transport: :class:`~host.transport.job.NetworkAggregator` over
:class:`~host.transport.ports.RawEndpoint` (AF_PACKET) opened inside each host's namespace, one
thread per worker; a worker that dies is a real process killed with SIGKILL mid-round.

BMv2 produces lanes of at most 16 bits (``max_data_lane_bits``); the jobs here have n·g ≤ 255,
so 8-bit lanes. Each test installs its own job (own id, job index and slot range).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
import torch

from host.netns import in_netns
from host.protocol import generated_dataplane as dp
from host.protocol.layout import COORDS_PER_PACKET, DropReason, lane_bits_for
from host.thc import THCCodec
from host.transport.faults import FaultyEndpoint
from host.transport.job import JobSpec, NetworkAggregator, RawNetworkSpec
from host.transport.ports import RawEndpoint
from host.transport.slots import SlotConfig, SlotTimeoutError
from tests.support.aggnet import P4_JSON, WORKERS, Bmv2Network, SwitchJob, Worker
from tests.support.transport import (
    FAULT_IDS,
    FAULTS,
    assert_bit_identical,
    assert_exact_sums,
    assert_faults_in_effect,
    close_all,
    encode_all,
    packed_sums,
    run_workers,
    worker_data,
)

pytestmark = [pytest.mark.root, pytest.mark.bmv2]

SWITCH = "s0"
GATEWAY_MAC = "02:00:00:00:ff:fe"  # BMv2 does not check the destination MAC of THC frames
SLOTS_PER_JOB = 16  # 16 jobs x 16 slots = the program's THC_SLOTS (p4/v1model/include/size.p4)
_jobs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per network object


@pytest.fixture(scope="module")
def bmv2(tmp_path_factory):
    """One BMv2 with hosts w0..w7 attached, started with the netco program, no jobs."""
    if not P4_JSON.exists():
        pytest.skip(f"{P4_JSON} missing: run `make -C p4` with p4c on PATH")
    net = Bmv2Network(tmp_path_factory.mktemp("bmv2-transport"), prefix=f"ntx{os.getpid() % 10000}")
    net.add_switch(SWITCH)
    for name in WORKERS:
        net.add_host(name, SWITCH)
    net.start()
    try:
        yield net
    finally:
        net.stop()


def install_job(net: Bmv2Network, n: int, codec: THCCodec, udp_port: int = 0) -> SwitchJob:
    """Install a new job of workers w0..w(n-1) with the codec's table (controller's entries);
    ``udp_port``: the UDP source port the sender bindings name (0: any)."""
    k = next(_jobs.setdefault(net, itertools.count(0)))
    assert k < dp.MAX_JOBS, "more jobs than MAX_JOBS in p4/shared/size.p4"
    members = [Worker(rank=r, port=net.hosts[h].port, ip=net.hosts[h].ip, mac=net.hosts[h].mac,
                      udp_port=udp_port) for r, h in enumerate(WORKERS[:n])]
    lane = lane_bits_for(n, codec.cfg.granularity)
    assert lane <= net.max_data_lane_bits
    job = SwitchJob(job_id=200 + k, index=k, table=list(codec.table), lane_bits=lane,
                    self_ip=net.switch_ip(SWITCH), contributors=members,
                    slot_base=k * SLOTS_PER_JOB, num_slots=SLOTS_PER_JOB)
    net.install_job(SWITCH, job)
    return job


def raw_spec(net: Bmv2Network, job: SwitchJob, n: int, policy: str = "exact") -> RawNetworkSpec:
    """How workers w0..w(n-1) reach the switch; ``ns_pids`` holds namespace paths here."""
    hosts = [net.hosts[h] for h in WORKERS[:n]]
    return RawNetworkSpec(
        ns_pids=tuple(f"/var/run/netns/{net._host_ns[h]}" for h in WORKERS[:n]),  # type: ignore[arg-type]
        ifnames=tuple(net._host_if[h] for h in WORKERS[:n]),
        macs=tuple(h.mac for h in hosts), ips=tuple(h.ip for h in hosts),
        gateway_macs=(GATEWAY_MAC,) * n, gateway_ips=(job.self_ip,) * n,
        job_id=job.job_id, num_slots=job.num_slots, policy=policy, token=job.token)


def aggregator(spec: RawNetworkSpec, rank: int, world: int, slots: SlotConfig,
               mmsg: bool = True, **faults) -> NetworkAggregator:
    """Like ``spec.connect`` with explicit timing, optionally behind the fault layer."""
    ep = in_netns(spec.ns_pids[rank], lambda: RawEndpoint(
        spec.ifnames[rank], spec.macs[rank], spec.gateway_macs[rank], spec.ips[rank],
        spec.gateway_ips[rank], mmsg=mmsg))
    if faults:
        ep = FaultyEndpoint(ep, seed=rank, **faults)
    return NetworkAggregator(ep, JobSpec(spec.job_id, rank, world, spec.num_slots, token=spec.token),
                             slots)

@pytest.mark.parametrize("n", [2, 4, 8])
def test_exact_integer_sums(bmv2, n):
    """Sizes leave a partial last packet (and a partial THC block); sums equal the reference."""
    codec = THCCodec()
    job = install_job(bmv2, n, codec)
    spec = raw_spec(bmv2, job, n)
    for numel in (1, 4097, 70_001):
        xs = worker_data(n, numel, numel + n)
        encs = encode_all(codec, xs)
        padded = encs[0].layout.padded
        want = packed_sums(codec, encs, padded)
        # spec.connect is the launchers' path; every size is a new session on the same job
        session = replace(spec, round_base=1 + (numel << 8))
        aggs = [session.connect(r, n) for r in range(n)]
        try:
            got = run_workers(n, lambda r: aggs[r].sum_encoded(encs[r], codec))  # noqa: B023
        finally:
            close_all(aggs)
        assert_exact_sums(got, n, want)


def test_raw_workers_send_from_the_jobs_worker_port(bmv2):
    """issue 33: a job whose sender bindings name UDP port 7000 (the controller's
    ``worker_port``): ``RawNetworkSpec(worker_port=7000).connect`` frames leave from it and sum
    exactly; from THC's port (no worker port given) they are BAD_SENDER, nothing summed."""
    n, codec = 2, THCCodec()
    job = install_job(bmv2, n, codec, udp_port=7000)
    xs = worker_data(n, 4097, 11)
    encs = encode_all(codec, xs)
    want = packed_sums(codec, encs, encs[0].layout.padded)
    spec = replace(raw_spec(bmv2, job, n), worker_port=7000)
    aggs = [spec.connect(r, n) for r in range(n)]
    try:
        got = run_workers(n, lambda r: aggs[r].sum_encoded(encs[r], codec))
    finally:
        close_all(aggs)
    assert_exact_sums(got, n, want)
    before = bmv2.drop_counts(SWITCH).get(int(DropReason.BAD_SENDER), 0)
    spec = replace(raw_spec(bmv2, job, n), round_base=1 << 20)      # THC's port: not bound
    aggs = [aggregator(spec, r, n, SlotConfig(give_up=1.0)) for r in range(n)]
    try:
        with pytest.raises(SlotTimeoutError):
            aggs[0].sum_encoded(encs[0], codec)
    finally:
        close_all(aggs)
    assert bmv2.drop_counts(SWITCH).get(int(DropReason.BAD_SENDER), 0) > before


def test_per_datagram_raw_endpoints_sum_exactly(bmv2):
    """The fallback without sendmmsg/recvmmsg (one send/recv per frame) gives the same sums."""
    n, numel = 2, 20_000
    codec = THCCodec()
    job = install_job(bmv2, n, codec)
    spec = raw_spec(bmv2, job, n)
    xs = worker_data(n, numel, 5)
    encs = encode_all(codec, xs)
    want = packed_sums(codec, encs)
    aggs = [aggregator(spec, r, n, SlotConfig(), mmsg=False) for r in range(n)]
    try:
        got = run_workers(n, lambda r: aggs[r].sum_encoded(encs[r], codec))
    finally:
        close_all(aggs)
    assert_exact_sums(got, n, want)


def test_allreduce_equals_the_in_process_protocol(bmv2):
    """Norm agreement (NORM maxima at the switch), encode, sum, decode: bit-identical."""
    n = 4
    codec = THCCodec()
    job = install_job(bmv2, n, codec)
    spec = raw_spec(bmv2, job, n)
    xs = worker_data(n, 33_333, 7)
    aggs = [spec.connect(r, n) for r in range(n)]
    try:
        got = run_workers(n, lambda r: aggs[r].allreduce(xs[r], codec))
    finally:
        close_all(aggs)
    assert_bit_identical(codec, xs, got)


@pytest.mark.parametrize("faults", FAULTS, ids=FAULT_IDS)
def test_sums_stay_exact_under_faults(bmv2, faults):
    n = 4
    codec = THCCodec()
    job = install_job(bmv2, n, codec)
    spec = raw_spec(bmv2, job, n)
    xs = worker_data(n, 40_000, 11)
    slots = SlotConfig(rto=0.01, max_rto=0.1)
    aggs = [aggregator(spec, r, n, slots, **faults) for r in range(n)]
    t0 = time.monotonic()
    try:
        got = run_workers(n, lambda r: aggs[r].allreduce(xs[r], codec))
    finally:
        close_all(aggs)
    elapsed = time.monotonic() - t0
    assert_bit_identical(codec, xs, got)
    assert_faults_in_effect(faults, [a.ep.stats for a in aggs], aggs)
    print(f"BMv2, faults {faults}: completed in {elapsed:.2f} s")


# A worker process that joins the job, agrees on norms, then kills itself with SIGKILL after
# sending ``die_after`` DATA datagrams: a real process death in the middle of the data round.
_DYING = r"""
import json, os, signal, sys
import torch
from host.protocol.codec import HEADER_STRUCT
from host.protocol.layout import MsgType
from host.thc import THCCodec
from host.transport.job import RawNetworkSpec
spec = RawNetworkSpec(**{k: tuple(v) if isinstance(v, list) else v
                         for k, v in json.loads(sys.argv[1]).items()})
rank, world, numel, seed, die_after = (int(v) for v in sys.argv[2:7])
g = torch.Generator().manual_seed(seed)
x = [torch.randn(numel, generator=g) * (1 + r) for r in range(world)][rank]
agg = spec.connect(rank, world)
inner_send = agg.ep.send_many
sent = 0
def send_many(dgs):
    global sent
    for d in dgs:
        if HEADER_STRUCT.unpack_from(d)[1] == MsgType.DATA:
            sent += 1
            if sent > die_after:
                os.kill(os.getpid(), signal.SIGKILL)
        inner_send([d])
agg.ep.send_many = send_many
print("ready", flush=True)
sys.stdin.readline()  # go: the live workers are up
agg.allreduce(x, THCCodec())
print("survived", flush=True)
"""


def start_dying_worker(spec: RawNetworkSpec, rank: int, world: int, numel: int, seed: int,
                       die_after: int) -> subprocess.Popen:
    args = json.dumps({k: getattr(spec, k) for k in spec.__dataclass_fields__})
    return subprocess.Popen([sys.executable, "-c", _DYING, args, str(rank), str(world),
                             str(numel), str(seed), str(die_after)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def go(proc: subprocess.Popen) -> None:
    """Wait until the dying worker is connected, then let it start its all-reduce."""
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", proc.stderr.read() if proc.stderr else line
    proc.stdin.write("go\n")
    proc.stdin.flush()


@contextlib.contextmanager
def dying_worker(spec: RawNetworkSpec, world: int, numel: int, seed: int, die_after: int,
                 aggs: list[NetworkAggregator]) -> Iterator[subprocess.Popen]:
    """The last rank as a process of its own that dies after ``die_after`` DATA datagrams,
    connected and told to start; after the block the live ranks' ``aggs`` are closed and the
    process killed if it still runs."""
    dying = start_dying_worker(spec, world - 1, world, numel, seed, die_after=die_after)
    try:
        go(dying)
        yield dying
    finally:
        close_all(aggs)
        if dying.poll() is None:
            dying.kill()
            dying.wait(10)


def test_worker_killed_mid_round_partial_policy(bmv2):
    """Rank 3 dies after 20 DATA datagrams: later packets hold m = 3, decoded unbiased."""
    n, numel, seed = 4, 60 * 1024, 21  # 240 packets, window 16
    codec = THCCodec()
    job = install_job(bmv2, n, codec)
    spec = raw_spec(bmv2, job, n, policy="partial")
    xs = worker_data(n, numel, seed)
    # counts must be n or n - 1 only: a generous wait once the dead rank is known
    slots = SlotConfig(policy="partial", deadline=0.3, rto=0.02, max_rto=0.1, suspect_wait=0.1)
    aggs = [aggregator(spec, r, n, slots) for r in range(n - 1)]

    def work(r: int):  # allreduce's steps, keeping the integer sums for the check
        a = aggs[r]
        norms = a.max_floats(codec.chunk_norms(xs[r]))
        enc = codec.encode(xs[r], norms, worker=r, round=0)
        sums, count = a.sum_encoded(enc, codec)
        return norms, sums, count, codec.decode(sums, count, norms, numel, round=0)

    with dying_worker(spec, n, numel, seed, 20, aggs) as dying:
        got = run_workers(n - 1, work, timeout=90)
        dying.wait(30)
    assert dying.returncode == -signal.SIGKILL, dying.stderr.read() if dying.stderr else ""
    # The norm round completed with all four (rank 3 died in the data round).
    want_norms = torch.stack([codec.chunk_norms(x) for x in xs]).amax(0)
    encs = [codec.encode(x, want_norms, worker=r, round=0) for r, x in enumerate(xs)]
    table = torch.tensor(codec.table)
    vals = [table[codec.indices(e).long()].numpy().astype(np.int64) for e in encs]
    live_mean = torch.stack(xs[: n - 1]).mean(0)
    for a, (norms, sums, count, out) in zip(aggs, got, strict=True):
        assert torch.equal(norms, want_norms)
        assert a.last_count == n - 1 and a.window.stats.missing_ranks == {n - 1}
        c = count.numpy()
        assert set(np.unique(c)) == {n - 1, n}
        # Rank 3 sent its first window (16 packets) and at most 4 more before dying: all of
        # that was counted, nothing after.
        full = c[::COORDS_PER_PACKET] == n
        assert full[:SLOTS_PER_JOB].all() and SLOTS_PER_JOB <= full.sum() <= 20
        want = np.where(c == n, sum(vals), sum(vals[: n - 1]))
        np.testing.assert_array_equal(sums.numpy().astype(np.int64), want)
        # Unbiased: where rank 3 is missing, the decode is S/m, the average of the live three
        # (a decode of S/n would shrink it to 3/4).
        part = torch.from_numpy(c[:numel] == n - 1)
        o, ref = out[part], live_mean[part]
        gain = float((o * ref).sum() / (ref * ref).sum())
        nmse = float(((o - ref) ** 2).sum() / (ref * ref).sum())
        assert abs(gain - 1) < 0.05 and nmse < 0.1, (gain, nmse)


def test_worker_killed_mid_round_exact_policy_names_it(bmv2):
    n, numel, seed = 4, 40 * 1024, 23
    codec = THCCodec()
    job = install_job(bmv2, n, codec)
    spec = raw_spec(bmv2, job, n)
    xs = worker_data(n, numel, seed)
    slots = SlotConfig(policy="exact", give_up=1.0, rto=0.05, max_rto=0.2)
    aggs = [aggregator(spec, r, n, slots) for r in range(n - 1)]
    with dying_worker(spec, n, numel, seed, 10, aggs) as dying:
        with pytest.raises(SlotTimeoutError, match=r"missing ranks \[3\]") as exc:
            run_workers(n - 1, lambda r: aggs[r].allreduce(xs[r], codec), timeout=90)
        dying.wait(30)
    assert exc.value.missing == [n - 1]
    assert dying.returncode == -signal.SIGKILL
