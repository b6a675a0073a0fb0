"""The kernel's limit for the data path's socket pattern: ``kecho.c``, built and run here.

``kecho.c`` (next to this module) keeps a window of datagrams in flight from N client threads
to one echo thread and back, with the data path's batching (``sendmmsg``/``recvmmsg``, UDP
GSO/GRO trains), datagram sizes and waiting (``host/busywait.py``), doing nothing else per
datagram: what the machine's
kernel allows, measured in the same run as the goodput it is compared with
(``benchmarks/transport.py``). It is compiled at run time with the system C compiler into a
temporary folder (no binary is committed); :func:`build` returns None without a compiler.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from host.busywait import SPIN_US

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("kecho.c")


@functools.cache
def build() -> Path | None:
    """Compile ``kecho.c`` with ``cc -O2`` into a temporary folder; None without a compiler."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    tmp = tempfile.mkdtemp(prefix="netco-kecho-")
    atexit.register(shutil.rmtree, tmp, True)
    out = Path(tmp) / "kecho"
    include = Path(__file__).resolve().parents[1] / "protocol"   # netco_layout.h, netco_sockets.h
    r = subprocess.run([cc, "-O2", "-pthread", f"-I{include}", "-o", str(out), str(SOURCE)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        log.warning("kecho.c did not compile: %s", r.stderr.strip()[-500:])
        return None
    return out


def _run(args: list[str], timeout: float) -> list[float]:
    exe = build()
    if exe is None:
        raise RuntimeError("no C compiler: the kernel limit (kecho.c) cannot be measured")
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout,
                       check=False)
    if r.returncode != 0:
        raise RuntimeError(f"kecho {' '.join(args[:2])}: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["per_client_datagrams_per_s"]


def udp_limit(clients: int, size: int, reply: int, *, batch: int = 256, gso: int = 64,
              count: int = 200_000, window: int = 256, spin_us: int = SPIN_US,
              cpu: int = -1, timeout: float = 120) -> list[float]:
    """Round trips per second of each of ``clients`` UDP clients on loopback (addresses
    127.0.0.11..) against one echo thread: ``size``-byte datagrams up, ``reply``-byte answers
    down, ``window`` in flight, ``batch`` messages per system call, ``gso`` datagrams per
    UDP_SEGMENT message (1: one datagram per message, no GRO); each side polls ``spin_us``
    microseconds before it sleeps, as the data path does (``host/busywait.py``). ``cpu`` >= 0
    runs the echo thread on that CPU alone and the clients on the other CPUs, as the benchmark
    places the switch and its workers (``host/placement.py``); -1 leaves it to the scheduler."""
    return _run(["udp", str(clients), str(size), str(reply), str(batch), str(max(1, gso)),
                 str(count), str(window), str(spin_us), str(cpu)], timeout)


def packet_limit(size: int, reply: int, links: list[tuple[str, str, str]], *, batch: int = 256,
                 count: int = 100_000, window: int = 256, spin_us: int = SPIN_US,
                 cpu: int = -1, timeout: float = 120) -> list[float]:
    """The same over AF_PACKET: ``links`` holds per client (network namespace file, interface
    in it, peer interface here); frames of ``size`` bytes (Ethernet/IPv4/UDP included) go
    out of the client's interface and the echo thread answers from the peer (root); ``cpu`` as
    for :func:`udp_limit`."""
    args = ["packet", str(len(links)), str(size), str(reply), str(batch), "1", str(count),
            str(window), str(spin_us), str(cpu)]
    for ns, ifname, peer in links:
        args += [ns, ifname, peer]
    return _run(args, timeout)
