"""What the Mininet testbed tests share: leftover detection and packet counts."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from host.protocol.layout import COORDS_PER_PACKET, NORMS_PER_PACKET


def leftovers(tag: str, markers: list[str]) -> list[str]:
    """Our interfaces, and processes whose command line names a P4Runtime address or our workdir."""
    found = [n for n in os.listdir("/sys/class/net") if n.startswith(tag)]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(m in cmd for m in markers):
            found.append(f"pid {pid}: {cmd[:80]}")
    return found


def packets_per_allreduce(codec, size: int) -> int:
    """DATA plus NORM packets one worker sends for one tensor of ``size`` elements."""
    padded = codec.layout(size).padded
    norms = codec.chunk_norms(torch.zeros(size))
    return -(-padded // COORDS_PER_PACKET) + -(-norms.numel() // NORMS_PER_PACKET)


def assert_exact_allreduce(tb, size: int, seed: int, rounds: int, timeout: float):
    """``rounds`` all-reduces of the workers' tensors (:func:`control_plane.testbed.worker.tensor`)
    through testbed ``tb``: every rank's every result is the in-process protocol's, bit for bit.
    Returns the job's codec."""
    from control_plane.testbed.worker import tensor
    from host.thc.simulate import allreduce as simulate

    outs = tb.allreduce(lambda r, k: tensor(seed, r, k, size), rounds=rounds, timeout=timeout)
    codec = tb.codec(tb.job())
    for k in range(rounds):
        ref = simulate(codec, [tensor(seed, r, k, size) for r in range(len(outs))], round=k).average
        for r in range(len(outs)):
            torch.testing.assert_close(outs[r][k], ref, rtol=0, atol=0)
    return codec
