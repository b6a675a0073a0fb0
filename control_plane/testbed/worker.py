"""One worker of an in-network THC all-reduce, run as a process inside a Mininet host.

``python -m control_plane.testbed.worker --ifname eth0 --src-mac ... --rank R ...`` draws its
tensor with :func:`tensor` (so a checker can draw every worker's tensor again), runs
``--rounds`` all-reduces through its switch with a
:class:`host.transport.job.NetworkAggregator` on a raw-frame endpoint, and writes the results
(``--out``, a ``.npy`` of shape ``(rounds, size)``) and a JSON summary next to it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def tensor(seed: int, rank: int, rnd: int, size: int):
    """Worker ``rank``'s tensor of round ``rnd``: standard normal, seeded by all three."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 1009 + rnd)
    return torch.randn(size, generator=g)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m control_plane.testbed.worker", description=__doc__)
    for name in ("ifname", "src-mac", "dst-mac", "src-ip", "dst-ip", "out"):
        p.add_argument(f"--{name}", required=True)
    for name in ("job-id", "rank", "world", "num-slots", "b", "g", "size"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--p", type=float, required=True, help="THC clipped tail mass")
    p.add_argument("--policy", default="exact")
    p.add_argument("--rto", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--lane-bits", type=int, default=0,
                   help="the job's result lane width (0: derived from world and g)")
    p.add_argument("--token", type=int, default=0,
                   help="the job's token as the controller installed it (set_job.token)")
    p.add_argument("--worker-port", type=int, default=0,
                   help="the UDP port frames leave from: the job's worker_port, which the "
                        "switch binds each member to (0: THC's port)")
    args = p.parse_args(argv)

    import numpy as np

    from host.protocol.layout import THC_UDP_PORT
    from host.thc.codec import THCCodec
    from host.thc.config import THCConfig
    from host.transport.job import JobSpec, NetworkAggregator
    from host.transport.ports import RawEndpoint
    from host.transport.slots import SlotConfig

    codec = THCCodec(THCConfig(bits=args.b, granularity=args.g, clip_mass=args.p))
    ep = RawEndpoint(args.ifname, args.src_mac, args.dst_mac, args.src_ip, args.dst_ip,
                     sport=args.worker_port or THC_UDP_PORT)
    spec = JobSpec(args.job_id, args.rank, args.world, args.num_slots, args.g,
                   lane_bits=args.lane_bits, token=args.token)
    agg = NetworkAggregator(ep, spec, SlotConfig(rto=args.rto, max_rto=max(0.5, 4 * args.rto),
                                                 policy=args.policy))
    outs = []
    t0 = time.monotonic()
    ok = False
    try:
        for rnd in range(args.rounds):
            outs.append(agg.allreduce(tensor(args.seed, args.rank, rnd, args.size), codec).numpy())
        elapsed = time.monotonic() - t0
        ok = True
    finally:
        agg.close(finish=ok)   # the closing exchange (docs/transport.md) after a full run
    out = Path(args.out)
    np.save(out, np.stack(outs))
    out.with_suffix(".json").write_text(json.dumps({
        "rank": args.rank, "rounds": args.rounds, "size": args.size, "elapsed_s": round(elapsed, 4),
        "bytes_sent": agg.bytes_sent, "bytes_received": agg.bytes_received,
        "last_count": agg.last_count, "out": str(out),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
