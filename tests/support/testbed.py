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
