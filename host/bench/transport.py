"""Transport benchmark: THC all-reduce through the software target vs the socket-path limit.

Prints one JSON object::

    {"udp": [{"workers", "coords_per_s", "packets_per_s", "payload_gbps", "limit_packets_per_s",
              "fraction_of_limit"}, ...],
     "allreduce_16m": {"elements", "thc_network_s", "gloo_fp32_s", "nmse"}}

Workers are separate processes on loopback, each with its own address, talking to one
``python -m host.softswitch`` process configured by the controller. The *limit* is the same
setup with the switch in ``--echo`` mode (a plain receive-and-send loop on the same sockets)
and the same worker code path (batched sends, a window of datagrams in flight), measured in the
same run. Goodput counts the coordinates aggregated per worker per second; ``payload_gbps`` the
compressed THC payload (4 bits per coordinate) sent per worker. The 16M-element comparison runs
one THC all-reduce (norms, encode, network, decode) against ``torch.distributed`` gloo's
all-reduce of the fp32 tensor, with the same number of worker processes on the same machine.
veth/AF_PACKET figures come from the testbed (``docs/testbed.md``), which needs root.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time

from control_plane.embedded import EmbeddedNetwork, free_port
from host.protocol.layout import COORDS_PER_PACKET, INDICES, THC_HEADER_BYTES


def _echo_worker(addr, n_packets: int, window: int, barrier, q) -> None:
    from host.transport.ports import UdpEndpoint

    ep = UdpEndpoint(addr.switch, bind=(addr.ip, 0))
    dg = bytes(THC_HEADER_BYTES + INDICES.nbytes)
    barrier.wait()
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
    q.put(("echo", addr.rank, got / (time.perf_counter() - t0)))
    ep.close()


def _thc_worker(addr, world: int, coords: int, num_slots: int, base: int, barrier, q) -> None:
    import torch

    from host.thc import THCCodec
    from host.transport.job import JobSpec, NetworkAggregator
    from host.transport.ports import UdpEndpoint

    torch.set_num_threads(1)
    codec = THCCodec()
    x = torch.randn(coords, generator=torch.Generator().manual_seed(addr.rank))
    norms = codec.chunk_norms(x)  # the goodput run skips agreement: same scale is not needed
    enc = codec.encode(x, norms, worker=addr.rank, round=0)
    ep = UdpEndpoint(addr.switch, bind=(addr.ip, 0))
    agg = NetworkAggregator(ep, JobSpec(1, addr.rank, world, num_slots=num_slots, round_base=base))
    barrier.wait()
    t0 = time.perf_counter()
    agg.sum_encoded(enc, codec)
    dt = time.perf_counter() - t0
    q.put(("thc", addr.rank, dt, agg.window.stats.retransmits))
    ep.close()


def _allreduce_worker(addr, world: int, numel: int, num_slots: int, base: int, barrier, q) -> None:
    import torch

    from host.thc import THCCodec
    from host.transport.job import JobSpec, NetworkAggregator
    from host.transport.ports import UdpEndpoint

    torch.set_num_threads(1)
    codec = THCCodec()
    x = torch.randn(numel, generator=torch.Generator().manual_seed(100 + addr.rank))
    ep = UdpEndpoint(addr.switch, bind=(addr.ip, 0))
    agg = NetworkAggregator(ep, JobSpec(1, addr.rank, world, num_slots=num_slots, round_base=base))
    barrier.wait()
    t0 = time.perf_counter()
    out = agg.allreduce(x, codec)
    dt = time.perf_counter() - t0
    q.put(("allreduce", addr.rank, dt, out[:1000].numpy().copy()))
    ep.close()


def _gloo_worker(rank: int, world: int, numel: int, port: int, q) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x = torch.randn(numel, generator=torch.Generator().manual_seed(100 + rank))
    dist.all_reduce(torch.ones(8))  # connect before timing
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_reduce(x)
    dt = time.perf_counter() - t0
    q.put(("gloo", rank, dt, (x[:1000] / world).numpy().copy()))
    dist.destroy_process_group()


def _run(procs: list[mp.Process], q, n: int, timeout: float) -> list[tuple]:
    for p in procs:
        p.start()
    out = [q.get(timeout=timeout) for _ in range(n)]
    for p in procs:
        p.join(10)
    return out


def udp_goodput(workers: int, coords: int, num_slots: int, limit_packets: int) -> dict:
    """Goodput of THC through the target and the echo limit, for ``workers`` processes."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with EmbeddedNetwork(workers, echo=True) as echo:
        bar = ctx.Barrier(workers)
        res = _run([ctx.Process(target=_echo_worker,
                                args=(echo.address(r), limit_packets, num_slots, bar, q))
                    for r in range(workers)], q, workers, 300)
    limit = min(r[2] for r in res)
    with EmbeddedNetwork(workers, num_slots=num_slots) as net:
        bar = ctx.Barrier(workers)
        res = _run([ctx.Process(target=_thc_worker,
                                args=(net.address(r), workers, coords, num_slots, 1, bar, q))
                    for r in range(workers)], q, workers, 600)
    dt = max(r[2] for r in res)
    pkts = -(-coords // COORDS_PER_PACKET)
    return {
        "workers": workers,
        "coords": coords,
        "seconds": dt,
        "coords_per_s": coords / dt,
        "packets_per_s": pkts / dt,
        "payload_gbps": coords * 4 / dt / 1e9,
        "retransmits": sum(r[3] for r in res),
        "limit_packets_per_s": limit,
        "fraction_of_limit": (pkts / dt) / limit,
    }


def allreduce_16m(workers: int, numel: int, num_slots: int) -> dict:
    """One THC all-reduce through the target vs gloo's fp32 all-reduce, same processes count."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with EmbeddedNetwork(workers, num_slots=num_slots) as net:
        bar = ctx.Barrier(workers)
        res = _run([ctx.Process(target=_allreduce_worker,
                                args=(net.address(r), workers, numel, num_slots, 1, bar, q))
                    for r in range(workers)], q, workers, 1200)
    thc_s = max(r[2] for r in res)
    thc_head = res[0][3]
    port = free_port(__import__("socket").SOCK_STREAM)
    res = _run([ctx.Process(target=_gloo_worker, args=(r, workers, numel, port, q))
                for r in range(workers)], q, workers, 600)
    gloo_s = max(r[2] for r in res)
    exact = res[0][3]
    nmse = float(((thc_head - exact) ** 2).sum() / (exact**2).sum())
    return {"workers": workers, "elements": numel, "thc_network_s": thc_s, "gloo_fp32_s": gloo_s,
            "thc_over_gloo": thc_s / gloo_s, "nmse_first_1000": nmse}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--coords", type=int, default=1 << 21, help="coordinates per goodput run")
    p.add_argument("--limit-packets", type=int, default=20_000, help="datagrams per echo run")
    p.add_argument("--slots", type=int, default=64, help="window (slots per job)")
    p.add_argument("--allreduce-elements", type=int, default=1 << 24,
                   help="size of the THC vs gloo comparison (0 skips it)")
    p.add_argument("--allreduce-workers", type=int, default=2)
    p.add_argument("--json", action="store_true", help="(always JSON)")


def run(args: argparse.Namespace) -> dict:
    out: dict = {"udp": [udp_goodput(w, args.coords, args.slots, args.limit_packets)
                         for w in args.workers]}
    if args.allreduce_elements:
        out["allreduce"] = allreduce_16m(args.allreduce_workers, args.allreduce_elements, args.slots)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    print(json.dumps(run(p.parse_args(argv)), indent=1))
    return 0
