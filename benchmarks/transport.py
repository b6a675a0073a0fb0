#!/usr/bin/env python3
"""Transport benchmark: THC all-reduce through the software target vs the socket-path limit.

Prints one JSON object::

    {"udp": [{"workers", "coords_per_s", "packets_per_s", "payload_gbps",
              "kernel_limit_packets_per_s", "fraction_of_kernel_limit",
              "limit_packets_per_s", "fraction_of_limit"}, ...],
     "veth": [same, over veth/AF_PACKET (root)],
     (udp rows also give "switch_cpu_us_per_frame": the switch process's CPU time per frame
      it received or sent during the goodput runs)
     "allreduce": {"elements", "thc_s", "network_s", "codec_s", "gloo_s", "thc_over_codec",
                   "thc_over_gloo", "nmse_first_1000", ...}}

``kernel_limit_packets_per_s`` is the kernel's limit for the data path's socket pattern,
measured in the same run by a C echo (``host/transport/kecho.c``, built with the system cc):
the same socket type (UDP on loopback; AF_PACKET over the same veth pairs), the same batching
(``sendmmsg``/``recvmmsg`` of 256, UDP GSO/GRO trains of 64 where the data path uses them),
the same datagram sizes (a DATA up, a RESULT down) and window, nothing else done per
datagram; ``fraction_of_kernel_limit`` = goodput packets/s ÷ that, run by run (over UDP each
goodput run is followed at once by a run of the echo; the median of the ratios). The older
``limit_packets_per_s`` (the switch's Python ``--echo`` loop with the Python endpoint loop) is
kept as a second column.

Workers are separate processes on loopback, each with its own address, talking to one
``python -m host.softswitch`` process configured by the controller. The *limit* is the same
setup with the switch in ``--echo`` mode (a plain receive-and-send loop on the same sockets)
and the same worker code path (batched sends, a window of datagrams in flight), measured in the
same run. Goodput counts the coordinates aggregated per worker per second; ``payload_gbps`` the
compressed THC payload (4 bits per coordinate) sent per worker. The 16M-element comparison runs
one THC all-reduce (norms, encode, network, decode) against ``torch.distributed`` gloo's
all-reduce of the fp32 tensor, with the same number of worker processes on the same machine.
With root, the same is measured over veth pairs into one network namespace per worker
(AF_PACKET raw frames on both sides; the limit is the switch's echo loop on the same ports).
Each goodput and limit measurement is repeated ``--repeats`` times in the same processes and the
fields are medians; the per-run values are in the ``*_runs`` fields (``_summary``).

    .venv/bin/python benchmarks/transport.py --json --workers 2 4

(goodput runs of 2^24 coordinates through a window of 256 by default; ``--send-thread``
chooses the switch's send thread, off by default where the workers share the machine's cores.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import statistics
import time

import numpy as np

from control_plane.embedded import EmbeddedNetwork
from host.bench.gloo import time_allreduce
from host.placement import pin, switch_and_workers
from host.protocol.framing import THC_OFFSET
from host.protocol.generated_dataplane import THC_SLOTS
from host.protocol.jobs import widest_width, width_problem
from host.protocol.layout import (
    COORDS_PER_PACKET,
    INDEX_BITS,
    MAX_WORKERS,
    THC_HEADER_BYTES,
    lane_bits_for,
)
from host.softswitch.launch import free_port
from host.transport import kecho
from host.transport.ports import UdpEndpoint

#: Ethernet + IPv4 + UDP in front of a THC message on a raw link.
RAW_HEADERS = THC_OFFSET


def send_thread_on(choice: str, workers: int) -> bool:
    """Whether the switch under test gets its send thread (``--send-thread``): ``on``/``off``
    as told; ``auto`` only where the machine has a core for every worker, the switch's loop
    and its sender. On a machine the workers share (2 cores here) the extra thread costs more
    than it overlaps (docs/transport.md, measured)."""
    if choice == "auto":
        return (os.cpu_count() or 1) >= workers + 2
    return choice == "on"


def switch_args(choice: str, workers: int) -> tuple[str, ...]:
    """The software target's command-line flag for :func:`send_thread_on`."""
    return ("--send-thread",) if send_thread_on(choice, workers) else ("--no-send-thread",)


def width_for(workers: int, asked: int | None) -> int:
    """The packet width of a run: ``asked`` (``--coords-per-packet``), else the widest the
    job's lanes allow (job default g = 30)."""
    return asked or widest_width(lane_bits_for(workers, 30))


def _sizes(workers: int, width: int) -> tuple[int, int]:
    """Bytes of a DATA message up and of its RESULT down (job default g = 30)."""
    return (THC_HEADER_BYTES + width * INDEX_BITS // 8,
            THC_HEADER_BYTES + width * lane_bits_for(workers, 30) // 8)


def _kernel_gso(workers: int, width: int) -> int:
    """Datagrams per train of the C echo: as the data path builds them (at most 65000
    bytes, GSO_MAX_BYTES; 1 where ``UdpEndpoint`` does not enable trains)."""
    up, down = _sizes(workers, width)
    return max(1, min(UdpEndpoint.default_gso(), 65000 // max(up, down)))


def kernel_udp_run(workers: int, num_slots: int, width: int, cpu: int = -1) -> float:
    """One run of the C echo over loopback UDP with the data path's batching and trains:
    the slowest client's round trips/s. ``cpu`` >= 0: the echo thread on that CPU alone and
    the clients on the others, as :func:`placement` puts the switch and its workers."""
    up, down = _sizes(workers, width)
    return min(kecho.udp_limit(workers, up, down, gso=_kernel_gso(workers, width),
                               window=num_slots, cpu=cpu))


def kernel_udp_best(workers: int, num_slots: int, width: int, cpu: int) -> tuple[float, float]:
    """The kernel's limit next to a goodput run: the C echo placed as the run was (``cpu``, the
    switch's CPU; -1: not placed) and left to the scheduler, the higher of the two (the
    machine's limit is the best placement's), and the placed run's own rate."""
    free = kernel_udp_run(workers, num_slots, width)
    placed = kernel_udp_run(workers, num_slots, width, cpu) if cpu >= 0 else free
    return max(free, placed), placed


def placement(choice: str) -> tuple[int, list[int]] | None:
    """Where ``--placement`` puts a goodput run: (the switch's CPU, the workers' CPUs), or None
    (``free``, or a machine with one CPU): host/placement.py."""
    return switch_and_workers() if choice == "pinned" else None


def kernel_udp_limit(workers: int, num_slots: int, repeats: int, width: int,
                     runs: list[float] | None = None) -> dict:
    """The C echo over loopback UDP with the data path's batching: per repeat the slowest
    client's round trips/s, with and without GSO/GRO trains (the data path uses them when
    ``UdpEndpoint`` enables them). ``runs``: the runs with trains, measured already (between
    the goodput runs, :func:`udp_goodput`)."""
    up, down = _sizes(workers, width)
    gso = _kernel_gso(workers, width)
    if runs is None:
        runs = [kernel_udp_run(workers, num_slots, width) for _ in range(repeats)]
    plain = runs if gso <= 1 else [
        min(kecho.udp_limit(workers, up, down, gso=1, window=num_slots, count=50_000))
        for _ in range(repeats)]
    return {"runs": runs, "plain_runs": plain, "gso": gso}


def _echo_rate(ep, n_packets: int, window: int, width: int = COORDS_PER_PACKET) -> float:
    """Datagrams/s of a window loop against an echoing switch: keep ``window`` in flight."""
    dg = bytes(THC_HEADER_BYTES + width * INDEX_BITS // 8)
    t0 = time.perf_counter()
    sent = min(window, n_packets)
    ep.send_many([dg] * sent)
    got = 0
    while got < n_packets:
        batch = ep.recv_many(0.5)
        if not batch:
            sent += 1  # a loss: keep the window full
            ep.send_many([dg])
            continue
        got += len(batch)
        more = min(len(batch), n_packets - sent)
        if more > 0:
            ep.send_many([dg] * more)
            sent += more
    return got / (time.perf_counter() - t0)


def _echo_worker(addr, n_packets: int, window: int, barrier, q, repeats: int = 1,
                 width: int = COORDS_PER_PACKET, cpus: list[int] | None = None) -> None:
    from host.transport.ports import UdpEndpoint

    if cpus:
        pin(cpus)
    ep = UdpEndpoint(addr.switch, bind=(addr.ip, 0))
    rates = []
    for _ in range(repeats):
        barrier.wait()
        rates.append(_echo_rate(ep, n_packets, window, width))
    q.put(("echo", addr.rank, rates))
    ep.close()


def _thc_worker(addr, world: int, coords: int, num_slots: int, base: int, barrier, q,
                repeats: int = 1, token: int = 0, width: int = COORDS_PER_PACKET,
                cpus: list[int] | None = None) -> None:
    import torch

    if cpus:
        pin(cpus)

    from host.thc import THCCodec
    from host.transport.job import JobSpec, NetworkAggregator
    from host.transport.ports import UdpEndpoint

    torch.set_num_threads(1)
    codec = THCCodec()
    x = torch.randn(coords, generator=torch.Generator().manual_seed(addr.rank))
    norms = codec.chunk_norms(x)  # the goodput run skips agreement: same scale is not needed
    enc = codec.encode(x, norms, worker=addr.rank, round=0)
    ep = UdpEndpoint(addr.switch, bind=(addr.ip, 0))
    agg = NetworkAggregator(ep, JobSpec(1, addr.rank, world, num_slots=num_slots, round_base=base,
                                        token=token, coords_per_packet=width))
    times = []
    sums = np.full(agg.sums_size(enc.layout.padded), 0, dtype=agg.spec.sums_dtype)  # reused
    # the parent measures the kernel's limit between the runs (udp_goodput); the first
    # exchange warms up (its run is a third as fast: buffers touched the first time)
    barrier.wait()
    agg.sum_encoded(enc, codec, out=sums)
    for _ in range(repeats):
        barrier.wait()
        t0 = time.perf_counter()
        agg.sum_encoded(enc, codec, out=sums)
        times.append(time.perf_counter() - t0)
        barrier.wait()
    barrier.wait()  # the last echo run is over: exit (not while it runs)
    q.put(("thc", addr.rank, times, agg.window.stats.retransmits, getattr(agg.window, "last_native", False)))
    ep.close()


def _allreduce_worker(addr, world: int, numel: int, num_slots: int, base: int, barrier, q,
                      repeats: int = 1, pipeline: int | None = None, token: int = 0,
                      width: int = COORDS_PER_PACKET) -> None:
    """``repeats`` THC all-reduces (timed behind a barrier) and, after each, the codec's own
    chunk norms + encode and decode of the same tensor in the same process (``codec_s``)."""
    import torch

    from host.thc import THCCodec
    from host.transport.job import JobSpec, NetworkAggregator
    from host.transport.ports import UdpEndpoint

    torch.set_num_threads(1)
    codec = THCCodec()
    x0 = torch.randn(numel, generator=torch.Generator().manual_seed(100 + addr.rank))
    ep = UdpEndpoint(addr.switch, bind=(addr.ip, 0))
    agg = NetworkAggregator(ep, JobSpec(1, addr.rank, world, num_slots=num_slots, round_base=base,
                                        token=token, coords_per_packet=width),
                            pipeline_coords=pipeline)
    runs = []
    out = None
    for k in range(repeats):
        x = x0.clone()   # in place, as gloo's all_reduce below (the copy is not timed there either)
        barrier.wait()
        t0 = time.perf_counter()
        out = agg.allreduce(x, codec, out=x)
        dt = time.perf_counter() - t0
        x = x0
        timing = dict(agg.last_timing)
        barrier.wait()
        t1 = time.perf_counter()
        norms = codec.chunk_norms(x)
        enc = codec.encode(x, norms, worker=addr.rank, round=k)
        t2 = time.perf_counter()
        sums = codec.values(enc) * world
        t3 = time.perf_counter()
        codec.decode(sums, world, norms, numel, round=k)
        t4 = time.perf_counter()
        runs.append({"thc_s": dt, "network_s": timing.get("network", float("nan")),
                     "norms_s": timing.get("norms", float("nan")),
                     "encode_s": timing.get("encode", float("nan")),
                     "decode_s": timing.get("decode", float("nan")),
                     "parts": timing.get("parts", 1),
                     "codec_encode_s": t2 - t1, "codec_decode_s": t4 - t3})
    assert out is not None
    q.put(("allreduce", addr.rank, runs, out[:1000].numpy().copy(),
           agg.window.stats.retransmits, agg.window.last_native))
    ep.close()


def _gloo_worker(rank: int, world: int, numel: int, port: int, q, repeats: int = 1) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x0 = torch.randn(numel, generator=torch.Generator().manual_seed(100 + rank))
    dist.all_reduce(torch.ones(8))  # connect before timing
    times, x = time_allreduce(x0, repeats)
    q.put(("gloo", rank, times, (x[:1000] / world).numpy().copy()))
    dist.destroy_process_group()


def _raw_worker_main(argv: list[str]) -> int:
    """``python benchmarks/transport.py --raw-worker MODE IF MAC DMAC IP DIP RANK WORLD COORDS
    SLOTS START [REPEATS PERIOD [TOKEN [WIDTH]]]``: one worker in a network namespace; prints
    one JSON line (TOKEN: the job's, as the controller installed it; WIDTH: coordinates per
    packet).

    MODE ``echo``: the window loop of :func:`_echo_worker` over a raw socket (the limit);
    ``thc``: ``sum_encoded`` through the switch. Run ``k`` (of REPEATS) waits until the clock
    passes START + k·PERIOD so that the workers begin together.
    """
    mode, ifname, mac, dmac, ip, dip = argv[:6]
    rank, world, coords, slots = (int(v) for v in argv[6:10])
    start = float(argv[10])
    repeats = int(argv[11]) if len(argv) > 11 else 1
    period = float(argv[12]) if len(argv) > 12 else 0.0
    token = int(argv[13]) if len(argv) > 13 else 0
    width = int(argv[14]) if len(argv) > 14 else COORDS_PER_PACKET
    import torch

    from host.thc import THCCodec
    from host.transport.job import JobSpec, NetworkAggregator
    from host.transport.ports import RawEndpoint

    torch.set_num_threads(1)
    ep = RawEndpoint(ifname, mac, dmac, ip, dip)
    if mode == "echo":
        rates = []
        for k in range(repeats):
            time.sleep(max(0.0, start + k * period - time.time()))
            rates.append(_echo_rate(ep, coords, slots, width))
        print(json.dumps({"rank": rank, "packets_per_s": rates[0], "runs": rates}))
        return 0
    codec = THCCodec()
    x = torch.randn(coords, generator=torch.Generator().manual_seed(rank))
    enc = codec.encode(x, codec.chunk_norms(x), worker=rank, round=0)
    agg = NetworkAggregator(ep, JobSpec(1, rank, world, num_slots=slots, token=token,
                                        coords_per_packet=width))
    times = []
    sums = np.full(agg.sums_size(enc.layout.padded), 0, dtype=agg.spec.sums_dtype)  # reused
    for k in range(repeats):
        time.sleep(max(0.0, start + k * period - time.time()))
        t0 = time.perf_counter()
        agg.sum_encoded(enc, codec, out=sums)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"rank": rank, "seconds": times[0], "runs": times,
                      "retransmits": agg.window.stats.retransmits,
                      "native": getattr(agg.window, "last_native", False)}))
    return 0


def _summary(workers: int, coords: int, times: list[float], limits: list[float],
             retransmits: int, native: bool, kernel: dict | None = None,
             width: int = COORDS_PER_PACKET) -> dict:
    """Goodput fields of one transport and worker count: medians over the repeats.

    ``times[k]``: the slowest worker's seconds of run k; ``limits[k]``: the slowest worker's
    echo packets/s of run k. ``fraction_of_limit`` is median goodput ÷ median limit; the
    per-run values are kept in the ``*_runs`` fields. ``kernel``: the C echo's runs
    (:func:`kernel_udp_limit`); ``fraction_of_kernel_limit`` is the median over k of run k's
    goodput ÷ the C echo's run k (measured right after it over UDP).
    """
    pkts = -(-coords // width)
    dt = statistics.median(times)
    limit = statistics.median(limits)
    extra: dict = {}
    if kernel is not None:
        klim = statistics.median(kernel["runs"])
        # run k's goodput against the kernel limit measured next to it (for UDP right after
        # it, :func:`udp_goodput`); the median of those
        fk = [(pkts / t) / lim for t, lim in zip(times, kernel["runs"], strict=True)]
        extra = {"kernel_limit_packets_per_s": klim,
                 "fraction_of_kernel_limit": statistics.median(fk),
                 "fraction_of_kernel_limit_runs": fk,
                 "kernel_limit_packets_per_s_runs": kernel["runs"],
                 "kernel_gso_segments": kernel.get("gso", 0)}
        if kernel.get("plain_runs") is not None and kernel.get("gso", 0) > 1:
            plain = statistics.median(kernel["plain_runs"])
            extra["kernel_limit_without_gso_packets_per_s"] = plain
    return {"workers": workers, "coords": coords, "coords_per_packet": width, "seconds": dt,
            "coords_per_s": coords / dt,
            "packets_per_s": pkts / dt, "payload_gbps": coords * 4 / dt / 1e9,
            "retransmits": retransmits, "limit_packets_per_s": limit,
            "fraction_of_limit": (pkts / dt) / limit, "repeats": len(times),
            "packets_per_s_runs": [pkts / t for t in times], "limit_packets_per_s_runs": limits,
            "fraction_of_limit_runs": [(pkts / t) / lim for t, lim in zip(times, limits, strict=True)],
            "c_slot_loop": native, **extra}


def veth_goodput(workers: int, coords: int, num_slots: int, limit_packets: int,
                 repeats: int = 1, width: int = COORDS_PER_PACKET,
                 send_thread: str = "auto", place: str = "pinned") -> dict:
    """Goodput through the software target over veth (AF_PACKET; root) and the raw echo limit.

    Each worker lives in its own network namespace behind a veth pair whose other end is a
    ``afpacket`` port of ``python -m host.softswitch`` (echo mode for the limit), configured by
    the controller. ``place`` as for :func:`udp_goodput` (the C echo's limit: the better of
    placed and not placed, measured before the goodput runs).
    """
    import subprocess
    import sys

    from control_plane.config import parse_config
    from control_plane.controller import Controller, run_sync

    cpus_at = placement(place)
    sw_cpu, w_cpus = cpus_at if cpus_at is not None else (-1, None)
    cpu_args = ["--cpu", str(sw_cpu)] if cpus_at is not None else []
    tag = f"ntb{os.getpid() % 10000}"
    ns = [f"{tag}w{r}" for r in range(workers)]
    sw_if = [f"{tag}s{r}" for r in range(workers)]
    h_if = [f"{tag}h{r}" for r in range(workers)]
    ips = [f"10.77.0.{r + 1}" for r in range(workers)]
    macs = [f"02:00:00:77:00:{r + 1:02x}" for r in range(workers)]
    sw_ip, sw_mac = "10.77.0.254", "02:4e:43:00:00:01"

    def sh(*cmd: str) -> None:
        subprocess.run(cmd, check=True, capture_output=True)

    procs: list[subprocess.Popen] = []
    try:
        for r in range(workers):
            sh("ip", "netns", "add", ns[r])
            sh("ip", "link", "add", sw_if[r], "type", "veth", "peer", "name", h_if[r])
            sh("ip", "link", "set", h_if[r], "netns", ns[r])
            sh("ip", "netns", "exec", ns[r], "ip", "link", "set", h_if[r], "address", macs[r])
            sh("ip", "netns", "exec", ns[r], "ip", "link", "set", h_if[r], "up")
            sh("ip", "link", "set", sw_if[r], "up")
            for dev, where in ((sw_if[r], None), (h_if[r], ns[r])):
                if shutil.which("ethtool") is None:   # offloads stay on (frames are raw)
                    break
                pre = ["ip", "netns", "exec", where] if where else []
                subprocess.run([*pre, "ethtool", "-K", dev, "tx", "off", "rx", "off"],
                               capture_output=True, check=False)

        def run_switch(echo: bool) -> subprocess.Popen:
            grpc = free_port(__import__("socket").SOCK_STREAM)
            cmd = [sys.executable, "-m", "host.softswitch", "--grpc", f"127.0.0.1:{grpc}",
                   "--slots", str(max(256, num_slots)), "--coords-per-packet", str(width)]
            cmd += switch_args(send_thread, workers)
            cmd += cpu_args
            for r in range(workers):
                cmd += ["--port", f"{r + 1}=afpacket:{sw_if[r]}"]
            if echo:
                cmd.append("--echo")
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            p.grpc = grpc  # type: ignore[attr-defined]
            end = time.monotonic() + 30
            import socket as _s

            while True:
                with _s.socket() as c:
                    if c.connect_ex(("127.0.0.1", grpc)) == 0:
                        break
                if time.monotonic() > end or p.poll() is not None:
                    raise RuntimeError("software switch did not start")
                time.sleep(0.05)
            return p

        def run_workers_in_ns(mode: str, n_items: int, dst_self: bool, token: int = 0) -> list[dict]:
            start = time.time() + 8.0  # after every worker imported torch and encoded
            period = 1.5 if repeats > 1 else 0.0
            ps = []
            for r in range(workers):
                dmac, dip = (macs[r], ips[r]) if dst_self else (sw_mac, sw_ip)
                ps.append(subprocess.Popen(
                    ["ip", "netns", "exec", ns[r], sys.executable, os.path.abspath(__file__),
                     "--raw-worker", mode, h_if[r], macs[r], dmac, ips[r], dip, str(r),
                     str(workers), str(n_items), str(num_slots), str(start), str(repeats),
                     str(period), str(token), str(width)],
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                    preexec_fn=(lambda: pin(w_cpus)) if w_cpus else None))
            out = []
            for p in ps:
                so, _ = p.communicate(timeout=300)
                out.append(json.loads(so.strip().splitlines()[-1]))
            return out

        up, down = _sizes(workers, width)
        links = [(f"/var/run/netns/{ns[r]}", h_if[r], sw_if[r]) for r in range(workers)]
        kplaced: list[float] = []
        kruns: list[float] = []
        for _ in range(repeats):  # as over UDP: the better of placed and not placed
            free = min(kecho.packet_limit(RAW_HEADERS + up, RAW_HEADERS + down, links,
                                          window=num_slots))
            placed = (min(kecho.packet_limit(RAW_HEADERS + up, RAW_HEADERS + down, links,
                                             window=num_slots, cpu=sw_cpu))
                      if cpus_at is not None else free)
            kruns.append(max(free, placed))
            kplaced.append(placed)
        kernel = {"runs": kruns, "gso": 0}
        echo = run_switch(echo=True)
        lim = run_workers_in_ns("echo", limit_packets, dst_self=True)
        echo.terminate()
        echo.wait(10)
        sw = run_switch(echo=False)
        cfg = parse_config({
            "switches": [{"name": "s1", "address": f"127.0.0.1:{sw.grpc}", "addr": sw_ip,
                          "mac": sw_mac, "target": "softswitch", "ports": workers}],
            "hosts": [{"name": f"w{r}", "mac": macs[r], "ip": ips[r], "attach": f"s1:{r + 1}"}
                      for r in range(workers)],
            "jobs": [{"name": "bench", "id": 1, "members": [f"w{r}" for r in range(workers)],
                      "num_slots": num_slots}],
        })
        ctl = Controller(cfg)
        res = run_sync(ctl.apply())
        if not all(r.ok for r in res):
            raise RuntimeError(f"controller apply failed: {[r.to_json() for r in res]}")
        thc = run_workers_in_ns("thc", coords, dst_self=False, token=ctl.tokens[1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                with contextlib.suppress(Exception):
                    p.wait(10)
        for r in range(workers):
            subprocess.run(["ip", "link", "del", sw_if[r]], capture_output=True, check=False)
            subprocess.run(["ip", "netns", "del", ns[r]], capture_output=True, check=False)
    limits = [min(x["runs"][k] for x in lim) for k in range(repeats)]
    times = [max(x["runs"][k] for x in thc) for k in range(repeats)]
    return {"transport": "veth", **_summary(workers, coords, times, limits,
                                            sum(x["retransmits"] for x in thc),
                                            all(x["native"] for x in thc), kernel, width),
            "placement": "pinned" if cpus_at is not None else "free",
            "switch_cpu": sw_cpu if cpus_at is not None else None,
            "kernel_limit_placed_packets_per_s_runs": kplaced}


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far, all its threads (0 if unknown)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(procs: list[mp.Process], q, n: int, timeout: float) -> list[tuple]:
    for p in procs:
        p.start()
    out = [q.get(timeout=timeout) for _ in range(n)]
    for p in procs:
        p.join(10)
    return out


def udp_goodput(workers: int, coords: int, num_slots: int, limit_packets: int,
                repeats: int = 1, width: int = COORDS_PER_PACKET,
                send_thread: str = "auto", place: str = "pinned") -> dict:
    """Goodput of THC through the target and the echo limit, for ``workers`` processes
    (``repeats`` runs of each in the same processes; medians, see :func:`_summary`).
    ``place``: ``pinned`` runs the switch on a CPU of its own and the workers on the others
    (:func:`placement`), ``free`` leaves them to the scheduler."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    cpus_at = placement(place)
    sw_cpu, w_cpus = cpus_at if cpus_at is not None else (-1, None)
    cpu_args = ("--cpu", str(sw_cpu)) if cpus_at is not None else ()
    with EmbeddedNetwork(workers, echo=True, coords_per_packet=width,
                         switch_args=cpu_args) as echo:
        bar = ctx.Barrier(workers)
        res = _run([ctx.Process(target=_echo_worker,
                                args=(echo.address(r), limit_packets, num_slots, bar, q, repeats,
                                      width, w_cpus))
                    for r in range(workers)], q, workers, 300 * repeats)
    limits = [min(r[2][k] for r in res) for k in range(repeats)]
    with EmbeddedNetwork(workers, num_slots=num_slots, coords_per_packet=width,
                         switch_args=switch_args(send_thread, workers) + cpu_args) as net:
        # this process joins the workers' barrier: it runs the C echo between their runs, so
        # that every goodput run has a kernel limit measured next to it (a shared VM's speed
        # changes by 2x within minutes; a limit measured minutes later compares badly)
        bar = ctx.Barrier(workers + 1)
        pid = net.proc.pid if net.proc is not None else None
        procs = [ctx.Process(target=_thc_worker,
                             args=(net.address(r), workers, coords, num_slots, 1, bar, q,
                                   repeats, net.token, width, w_cpus))
                 for r in range(workers)]
        for p in procs:
            p.start()
        cpu, klim, kplaced = 0.0, [], []
        bar.wait(600)  # the workers' warm-up exchange
        for _ in range(repeats):
            bar.wait(600)
            cpu0 = _cpu_s(pid)
            bar.wait(600)
            cpu += _cpu_s(pid) - cpu0
            best, placed = kernel_udp_best(workers, num_slots, width, sw_cpu)
            klim.append(best)
            kplaced.append(placed)
        bar.wait(600)
        res = [q.get(timeout=600) for _ in range(workers)]
        for p in procs:
            p.join(10)
    times = [max(r[2][k] for r in res) for k in range(repeats)]
    kernel = kernel_udp_limit(workers, num_slots, repeats, width, klim)
    out = _summary(workers, coords, times, limits, sum(r[3] for r in res),
                   all(r[4] for r in res), kernel, width)
    # the switch's CPU per frame it handled (each worker's DATA in, its RESULT out), less
    # sensitive to a loaded machine than the rates (counted during the runs only)
    frames = 2 * workers * -(-coords // width) * repeats
    out["switch_cpu_s"] = cpu
    out["placement"] = "pinned" if cpus_at is not None else "free"
    out["switch_cpu"] = sw_cpu if cpus_at is not None else None
    out["kernel_limit_placed_packets_per_s_runs"] = kplaced
    out["switch_cpu_us_per_frame"] = cpu / frames * 1e6 if pid is not None else None
    return out


def allreduce_16m(workers: int, numel: int, num_slots: int, repeats: int = 1,
                  pipeline: int | None = None, width: int = COORDS_PER_PACKET,
                  send_thread: str = "auto") -> dict:
    """THC all-reduce through the target vs gloo's fp32 all-reduce, same process count.

    Per repeat: ``thc_s`` the slowest worker's all-reduce (norm agreement, encode, network,
    decode; pipelined unless ``pipeline`` = 0), ``network_s`` its exchanges' own time (on the
    network thread, overlapped with the codec when pipelined), ``codec_s`` the codec's own
    chunk norms + encode + decode of the same tensor in the same processes right after,
    ``gloo_s`` gloo's fp32 all-reduce. Both all-reduces work in place (``allreduce(x, codec,
    out=x)``, ``dist.all_reduce(x)``) on a fresh copy of the worker's tensor made before the
    timed call. Fields are medians over the repeats;
    ``thc_over_codec`` = median thc_s ÷ median codec_s (the target: ≤ 1.5).
    """
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with EmbeddedNetwork(workers, num_slots=num_slots, coords_per_packet=width,
                         switch_args=switch_args(send_thread, workers)) as net:
        bar = ctx.Barrier(workers)
        res = _run([ctx.Process(target=_allreduce_worker,
                                args=(net.address(r), workers, numel, num_slots, 1, bar, q,
                                      repeats, pipeline, net.token, width))
                    for r in range(workers)], q, workers, 1200 * repeats)
    res.sort(key=lambda r: r[1])
    runs = [r[2] for r in res]

    def per_run(key: str) -> list[float]:
        return [max(w[k][key] for w in runs) for k in range(repeats)]

    thc = per_run("thc_s")
    codec = [max(w[k]["codec_encode_s"] + w[k]["codec_decode_s"] for w in runs)
             for k in range(repeats)]
    thc_head = res[0][3]
    port = free_port(__import__("socket").SOCK_STREAM)
    gres = _run([ctx.Process(target=_gloo_worker, args=(r, workers, numel, port, q, repeats))
                 for r in range(workers)], q, workers, 600 * repeats)
    gloo = [max(g[2][k] for g in gres) for k in range(repeats)]
    exact = gres[0][3]
    nmse = float(((thc_head - exact) ** 2).sum() / (exact**2).sum())
    med = statistics.median
    thc_s, codec_s, gloo_s = med(thc), med(codec), med(gloo)
    return {"workers": workers, "elements": numel, "coords_per_packet": width, "repeats": repeats,
            "thc_s": thc_s, "network_s": med(per_run("network_s")), "codec_s": codec_s,
            "gloo_s": gloo_s, "thc_over_codec": thc_s / codec_s, "thc_over_gloo": thc_s / gloo_s,
            "thc_encode_s": med(per_run("encode_s")), "thc_decode_s": med(per_run("decode_s")),
            "thc_norms_s": med(per_run("norms_s")), "parts": runs[0][0]["parts"],
            "retransmits": sum(r[4] for r in res), "c_slot_loop": all(r[5] for r in res),
            "udp_gso_segments": UdpEndpoint.default_gso(),
            "thc_s_runs": thc, "codec_s_runs": codec, "gloo_s_runs": gloo,
            # names of earlier versions of this report
            "thc_network_s": thc_s, "gloo_fp32_s": gloo_s, "nmse_first_1000": nmse}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4],
                   help="worker counts to measure, one goodput row each (default 2 4)")
    p.add_argument("--coords", type=int, default=1 << 24,
                   help="coordinates per goodput run (default 2^24: 16,384 packets of 1,024, "
                        "long enough for the window's start to matter little)")
    p.add_argument("--limit-packets", type=int, default=20_000, help="datagrams per echo run")
    p.add_argument("--slots", type=int, default=256,
                   help=f"window (slots per job, 1..{THC_SLOTS}: the P4 program's pool; the "
                        "kernel limit keeps as many in flight; default 256)")
    p.add_argument("--allreduce-elements", type=int, default=1 << 24,
                   help="size of the THC vs gloo comparison (0 skips it)")
    p.add_argument("--allreduce-workers", type=int, default=2,
                   help="worker processes of the THC vs gloo comparison (default 2)")
    p.add_argument("--send-thread", choices=("auto", "on", "off"), default="auto",
                   help="the software target's send thread (its --send-thread): auto = on only "
                        "where the machine has a core for every worker, the switch's loop and "
                        "its sender (default auto)")
    p.add_argument("--placement", choices=("pinned", "free"), default="pinned",
                   help="goodput runs: pinned = the switch on a CPU of its own (its "
                        "--cpu) and the workers on the others, the C echo's limit taken as the "
                        "better of that placement and none; free = the scheduler places all "
                        "(default pinned; free where the machine has one CPU; host/placement.py)")
    p.add_argument("--pipeline-coords", type=int, default=None,
                   help="part size of the pipelined THC all-reduce in coordinates (default "
                        "NetworkAggregator.PIPELINE_COORDS; 0: one encode, one exchange, one "
                        "decode)")
    p.add_argument("--repeats", type=int, default=5,
                   help="runs of each goodput and limit measurement in the same processes; "
                        "the medians are reported (runs of 2M coordinates scatter by ±30%%)")
    p.add_argument("--veth", action=argparse.BooleanOptionalAction, default=os.geteuid() == 0,
                   help="also measure over veth pairs in network namespaces (root; default: "
                        "when root)")
    p.add_argument("--coords-per-packet", type=int, default=None, metavar="W",
                   help="packet width of the software target and its workers (256, 512, 1024; "
                        "default: the widest the job's lanes allow, 1024 for 8-bit lanes; 256 is "
                        "what BMv2 and Tofino take; docs/protocol.md, 'Packet width')")
    p.add_argument("--json", action="store_true", help="(always JSON)")


def check_args(args: argparse.Namespace) -> str | None:
    """One line naming the flag and the fix for the first option this run cannot use, else
    None."""
    for w in [*args.workers, args.allreduce_workers]:
        if not 1 <= w <= MAX_WORKERS:
            flag = "--allreduce-workers" if w == args.allreduce_workers else "--workers"
            return f"{flag} {w}: give 1..{MAX_WORKERS} workers (the switch's bitmap)"
    for flag, value, least in (("--coords", args.coords, 1),
                               ("--limit-packets", args.limit_packets, 1),
                               ("--repeats", args.repeats, 1),
                               ("--allreduce-elements", args.allreduce_elements, 0),
                               ("--pipeline-coords", args.pipeline_coords or 0, 0)):
        if value < least:
            return f"{flag} {value}: give at least {least}"
    if not 1 <= args.slots <= THC_SLOTS:
        return (f"--slots {args.slots}: give 1..{THC_SLOTS} (the controller places jobs in the "
                f"P4 program's pool of {THC_SLOTS} slots)")
    if args.coords_per_packet is not None:
        for w in [*args.workers, *([args.allreduce_workers] if args.allreduce_elements else [])]:
            why = width_problem(args.coords_per_packet, lane_bits_for(w, 30))
            if why is not None:
                return f"--coords-per-packet {why} (with {w} workers)"
    return None


def run(args: argparse.Namespace) -> dict:
    r = max(1, args.repeats)
    wd = args.coords_per_packet
    st = args.send_thread
    out: dict = {"udp": [udp_goodput(w, args.coords, args.slots, args.limit_packets, r,
                                     width_for(w, wd), st, args.placement)
                         for w in args.workers]}
    if args.veth:
        out["veth"] = [veth_goodput(w, args.coords, args.slots, args.limit_packets, r,
                                    width_for(w, wd), st, args.placement)
                       for w in args.workers]
    for key in ("udp", "veth"):
        for row in out.get(key, []):
            row["switch_send_thread"] = send_thread_on(st, row["workers"])
    if args.allreduce_elements:
        out["allreduce"] = allreduce_16m(args.allreduce_workers, args.allreduce_elements,
                                         args.slots, r, args.pipeline_coords,
                                         width_for(args.allreduce_workers, wd), st)
        out["allreduce"]["switch_send_thread"] = send_thread_on(st, args.allreduce_workers)
    return out


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--raw-worker"]:
        return _raw_worker_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    problem = check_args(args)
    if problem is not None:
        p.error(problem)
    print(json.dumps(run(args), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
