"""Closed-loop THC load generator for benchmarking the software target (one process, n workers).

Each worker keeps ``window`` slots in flight with the protocol's self-clocked window
(``docs/protocol.md``): it sends round r+1 of a slot only when a message for round r of that
slot comes back — a multicast result from the aggregating switch, or its own packet from the
echo baseline. Sending and receiving use the same ``recvmmsg``/``sendmmsg`` batches as the
switch; a slot that sees no progress for ``rto`` seconds is sent again flagged ``RETX``.

Run as ``python -m host.softswitch.loadgen`` (the benchmark starts it, inside the workers'
network namespace for the veth runs); it prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import select
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from host.protocol import codec
from host.protocol import layout as lay
from host.softswitch.frames import thc_frame
from host.softswitch.netio import (
    IOVEC,
    MMSG,
    SOCKADDR_IN,
    AfPacketPort,
    MsgBatch,
    _sendmmsg,
    set_buffers,
)
from host.softswitch.pipeline import ROW, THC_OFF

#: The job token the generator's packets carry (a job's token is never 0: docs/protocol.md);
#: the benchmark installs its job with it.
TOKEN = 0x10AD_6E17

#: name -> byte offset of each THC header field in a THC message.
OFF = {name: off for name, (off, _) in lay.THC_FIELDS.items()}


class GenWorker:
    """One worker: a socket, ``window`` prebuilt messages (one per slot), the slot rounds."""

    def __init__(self, rank: int, job_id: int, window: int, *, udp_src: str | None = None,
                 udp_dst: tuple[str, int] | None = None, ifname: str | None = None,
                 mac: str = "", ip: str = "", switch_ip: str = "", batch: int = 256,
                 seed: int = 0, token: int = TOKEN) -> None:
        self.rank = rank
        self.window = window
        rng = np.random.default_rng(seed + rank)
        if ifname is not None:
            self.sock = AfPacketPort(rank + 1, ifname).sock
            self.off = THC_OFF
            self.named = False
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            set_buffers(s, 1 << 23)
            s.bind((udp_src, 0))
            self.sock = s
            self.off = 0
            self.named = True
        self.fd = self.sock.fileno()
        self.rows = np.zeros((window, ROW), dtype=np.uint8)
        self.lens = np.zeros(window, dtype=np.int64)
        for slot in range(window):
            h = codec.Header(msg_type=lay.MsgType.DATA, job_id=job_id, slot=slot, round=0, rank=rank,
                             token=token)
            idx = rng.integers(0, lay.TABLE_ENTRIES, lay.COORDS_PER_PACKET)
            msg = thc_frame(mac, ip, switch_ip, h, idx) if ifname is not None else codec.encode(h, idx)
            self.rows[slot, : len(msg)] = np.frombuffer(msg, dtype=np.uint8)
            self.lens[slot] = len(msg)
        self.round = np.zeros(window, dtype=np.int64)
        # send side: message headers pointing at the prebuilt rows
        self.shdr = np.zeros(window, dtype=MMSG)
        self.siov = np.zeros(window, dtype=IOVEC)
        self.dst = np.zeros(1, dtype=SOCKADDR_IN)
        self.shdr["iov"] = self.siov.ctypes.data + IOVEC.itemsize * np.arange(window, dtype=np.uint64)
        self.shdr["iovlen"] = 1
        if udp_dst is not None:
            self.dst["family"] = socket.AF_INET
            self.dst["port"] = udp_dst[1]
            self.dst["addr"] = int.from_bytes(socket.inet_aton(udp_dst[0]), "big")
            self.shdr["name"] = self.dst.ctypes.data
            self.shdr["namelen"] = SOCKADDR_IN.itemsize
        self.row_addr = self.rows.ctypes.data + ROW * np.arange(window, dtype=np.uint64)
        self.rx = MsgBatch(batch)
        self.received = 0
        self.sent = 0
        self.retx = 0
        self.progress = time.monotonic()

    def send(self, slots: np.ndarray) -> None:
        """Send the current round of ``slots``."""
        k = len(slots)
        if not k:
            return
        self.siov["base"][:k] = self.row_addr[slots]
        self.siov["len"][:k] = self.lens[slots]
        done = 0
        while done < k:
            r = _sendmmsg(self.fd, self.shdr.ctypes.data + MMSG.itemsize * done, k - done, 0)
            if r <= 0:
                break
            done += r
        self.sent += done

    def receive(self) -> int:
        """Read what is waiting, advance the slots whose current round came back, send them."""
        k = self.rx.recv(self.fd, 0, self.rx.capacity, self.off, self.named)
        if not k:
            return 0
        self.received += k
        base = self.off
        b = self.rx.buf[:k]
        slot = (b[:, base + OFF["slot"]].astype(np.int64) << 8) | b[:, base + OFF["slot"] + 1]
        o = base + OFF["round"]
        rnd = ((b[:, o].astype(np.int64) << 24) | (b[:, o + 1].astype(np.int64) << 16)
               | (b[:, o + 2].astype(np.int64) << 8) | b[:, o + 3])
        ok = slot < self.window
        slot, rnd = slot[ok], rnd[ok]
        hit = rnd == self.round[slot]
        adv = np.unique(slot[hit])
        if adv.size:
            self.round[adv] += 1
            self._write_round(adv)
            self.send(adv)
            self.progress = time.monotonic()
        return k

    def _write_round(self, slots: np.ndarray) -> None:
        r = self.round[slots]
        o = self.off + OFF["round"]
        for i in range(4):
            self.rows[slots, o + i] = (r >> (24 - 8 * i)) & 0xFF
        self.rows[slots, self.off + OFF["slot_set"]] = r & 1

    def retransmit(self) -> None:
        """Send every slot again (RETX) after a silence."""
        self.rows[:, self.off + OFF["flags"]] = lay.Flag.RETX
        self.send(np.arange(self.window))
        self.rows[:, self.off + OFF["flags"]] = 0
        self.retx += 1
        self.progress = time.monotonic()


C_SOURCE = Path(__file__).with_name("loadgen.c")


def build_c(workdir: Path) -> Path | None:
    """Compile ``loadgen.c`` into ``workdir`` with ``cc -O2``; ``None`` without a compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    exe = workdir / "netco-loadgen"
    header_dir = Path(lay.__file__).parent   # netco_layout.h, generated by p4/gen.py
    p = subprocess.run([cc, "-O2", "-I", str(header_dir), "-o", str(exe), str(C_SOURCE)],
                       capture_output=True, text=True, check=False)
    return exe if p.returncode == 0 else None


def write_templates(path: Path, job_id: int, window: int, workers: list[dict],
                    switch_ip: str = "10.0.0.254", seed: int = 0, token: int = TOKEN) -> int:
    """Messages for the C generator: per worker (``{"rank", "raw", "mac", "ip"}``), ``window``
    DATA messages of round 0, one per slot, with the job token ``token``; returns the message
    length."""
    out = bytearray()
    length = 0
    for w in workers:
        rng = np.random.default_rng(seed + w["rank"])
        for slot in range(window):
            h = codec.Header(msg_type=lay.MsgType.DATA, job_id=job_id, slot=slot, round=0,
                             rank=w["rank"], token=token)
            idx = rng.integers(0, lay.TABLE_ENTRIES, lay.COORDS_PER_PACKET)
            msg = thc_frame(w["mac"], w["ip"], switch_ip, h, idx) if w["raw"] else codec.encode(h, idx)
            length = len(msg)
            out += msg
    path.write_bytes(bytes(out))
    return length


def c_command(exe: Path, templates: Path, length: int, window: int, seconds: float, warmup: float,
              rto: float, endpoints: list[list[str]]) -> list[str]:
    """Command line of the C generator (endpoints: ``["udp", src, dst, port]`` or
    ``["raw", ifname]``)."""
    return [str(exe), str(templates), str(seconds), str(warmup), str(int(rto * 1000)),
            str(window), str(length), *[x for e in endpoints for x in e]]


def run(workers: list[GenWorker], seconds: float, warmup: float, rto: float) -> dict:
    """Drive the workers; returns counts over the measured interval."""
    ep = select.epoll()
    byfd = {w.fd: w for w in workers}
    for fd in byfd:
        ep.register(fd, select.EPOLLIN)
    for w in workers:
        w.send(np.arange(w.window))
    t0 = time.monotonic()
    t_start = t0 + warmup
    t_end = t_start + seconds
    base: dict[int, int] | None = None
    cpu0 = time.process_time()
    while True:
        now = time.monotonic()
        if base is None and now >= t_start:
            base = {w.rank: w.received for w in workers}
            cpu0 = time.process_time()
        if now >= t_end:
            break
        for fd, _ in ep.poll(0.005):
            byfd[fd].receive()
        for w in workers:
            if now - w.progress > rto:
                w.retransmit()
    base = base or {w.rank: 0 for w in workers}
    got = {w.rank: w.received - base[w.rank] for w in workers}
    return {"seconds": seconds, "received": sum(got.values()), "per_worker": got,
            "retransmissions": sum(w.retx for w in workers),
            "rounds_min": int(min(w.round.min() for w in workers)),
            "cpu_s": round(time.process_time() - cpu0, 3)}


def main(argv: list[str] | None = None) -> int:
    """Command line of the generator (used by ``benchmarks/softswitch.py``)."""
    p = argparse.ArgumentParser(prog="python -m host.softswitch.loadgen", description=__doc__)
    p.add_argument("--job", type=int, default=1)
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--rto", type=float, default=0.05)
    p.add_argument("--udp", action="append", default=[], metavar="SRC_IP>DST_IP:PORT",
                   help="one UDP worker per occurrence")
    p.add_argument("--raw", action="append", default=[], metavar="IFNAME,MAC,IP",
                   help="one AF_PACKET worker per occurrence")
    p.add_argument("--switch-ip", default="10.0.0.254")
    a = p.parse_args(argv)
    workers = []
    for r, spec in enumerate(a.udp):
        src, dst = spec.split(">")
        host, port = dst.rsplit(":", 1)
        workers.append(GenWorker(r, a.job, a.window, udp_src=src, udp_dst=(host, int(port))))
    for r, spec in enumerate(a.raw):
        ifname, mac, ip = spec.split(",")
        workers.append(GenWorker(r, a.job, a.window, ifname=ifname, mac=mac, ip=ip,
                                 switch_ip=a.switch_ip))
    if not workers:
        print("loadgen: give --udp or --raw workers", file=sys.stderr)
        return 2
    print(json.dumps(run(workers, a.seconds, a.warmup, a.rto)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
