#!/usr/bin/env python3
"""Benchmark of the software aggregation target: aggregated coordinates/s and packets/s.

For n = 2, 4, 8 workers, over loopback UDP (no root) and over veth pairs into a network
namespace (AF_PACKET; root), it measures in the same run:

* ``echo``: the plain receive-and-send loop on the same sockets and batches
  (``netco switch --echo``: every message goes straight back) — the limit;
* ``aggregate``: the software switch with a job of n workers installed over P4Runtime.

The load is one closed-loop generator process (``host.softswitch.loadgen``): every worker keeps
``--window`` slots in flight and sends the next round of a slot when that slot's message comes
back. Each message a switch receives is one contribution of 256 coordinates, so aggregated
coordinates/s = received packets/s x 256. Target (issue 5): aggregate >= 50 % of echo.

    .venv/bin/python benchmarks/softswitch.py --json              # both transports
    .venv/bin/python benchmarks/softswitch.py --modes udp --seconds 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

from host.paths import REPO
from host.protocol import layout as lay
from host.softswitch import loadgen
from host.softswitch.launch import (
    AsyncLoop,
    connect,
    free_tcp_port,
    free_udp_port,
    p4info_path,
    start_switch_process,
    stop_process,
)
from host.thc.table import DEFAULT_TABLE

ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
TABLE = list(DEFAULT_TABLE)   # THC's default table (b = 4, g = 30)
JOB = 1


def _cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _sh(*cmd: str, check: bool = True) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and p.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")


class Topology:
    """Switch ports and worker endpoints for one transport and n workers."""

    def __init__(self, mode: str, n: int, tag: str) -> None:
        self.mode, self.n = mode, n
        self.ns = f"{tag}g"
        self.veths: list[str] = []
        self.workers = []   # (rank, port, ip, mac)
        for r in range(n):
            ip = f"127.0.0.{10 + r}" if mode == "udp" else f"10.9.0.{r + 1}"
            self.workers.append((r, r + 1, ip, f"02:00:00:00:09:{r + 1:02x}"))
        if mode == "udp":
            self.udp = {r + 1: free_udp_port() for r in range(n)}
            self.ports = {p: f"udp:127.0.0.1:{u}" for p, u in self.udp.items()}
            self.gen = [a for r, p, ip, _ in self.workers for a in ("--udp", f"{ip}>127.0.0.1:{self.udp[p]}")]
            self.endpoints = [["udp", ip, "127.0.0.1", str(self.udp[p])] for _r, p, ip, _ in self.workers]
            self.prefix: list[str] = []
            self.switch_ip = "127.0.0.1"
        else:
            _sh("ip", "netns", "add", self.ns)
            self.ports, self.gen, self.endpoints = {}, [], []
            for r, p, ip, mac in self.workers:
                s_if, w_if = f"{tag}s{r}", f"{tag}w{r}"
                _sh("ip", "link", "add", s_if, "type", "veth", "peer", "name", w_if)
                self.veths.append(s_if)
                _sh("ip", "link", "set", w_if, "netns", self.ns)
                _sh("sysctl", "-qw", f"net.ipv6.conf.{s_if}.disable_ipv6=1", check=False)
                _sh("ip", "netns", "exec", self.ns, "sysctl", "-qw",
                    f"net.ipv6.conf.{w_if}.disable_ipv6=1", check=False)
                _sh("ip", "-n", self.ns, "link", "set", w_if, "address", mac, "up")
                _sh("ip", "link", "set", s_if, "up")
                self.ports[p] = f"afpacket:{s_if}"
                self.gen += ["--raw", f"{w_if},{mac},{ip}"]
                self.endpoints.append(["raw", w_if])
            self.prefix = ["ip", "netns", "exec", self.ns]
            self.switch_ip = "10.9.0.254"

    def close(self) -> None:
        for v in self.veths:
            _sh("ip", "link", "del", v, check=False)
        if self.mode == "veth":
            _sh("ip", "netns", "del", self.ns, check=False)


def _job_entities(topo: Topology, window: int) -> list:
    import finsy as fy
    n = topo.n
    ents = [
        fy.P4MulticastGroupEntry(1, replicas=[p for _, p, _, _ in topo.workers]),  # before the job
        fy.P4TableEntry("ingress.thc_validate.jobs", match=fy.P4TableMatch(job_id=JOB),
                        action=fy.P4TableAction(
                            "ingress.thc_validate.set_job", index=0, slot_base=0, num_slots=window,
                            expected=n, lane_bits=lay.lane_bits_for(n, max(TABLE)), mcast_grp=1,
                            has_parent=0, parent_port=0, parent_addr="0.0.0.0",
                            self_addr=topo.switch_ip, self_id=0, token=loadgen.TOKEN)),
        fy.P4TableEntry("ingress.thc_load.tables", match=fy.P4TableMatch(job_id=JOB),
                        action=fy.P4TableAction("ingress.thc_load.load_table",
                                                **{f"v{i}": v for i, v in enumerate(TABLE)})),
    ]
    for r, p, ip, mac in topo.workers:
        ents.append(fy.P4TableEntry(
            "ingress.thc_validate.senders",
            match=fy.P4TableMatch(job_id=JOB, rank=r, ingress_port=p, src_addr=ip),
            action=fy.P4TableAction("ingress.thc_validate.sender", is_switch=0, udp_port=0)))
        ents.append(fy.P4TableEntry(
            "egress.thc_members.members", match=fy.P4TableMatch(job_id=JOB, egress_port=p),
            action=fy.P4TableAction("egress.thc_members.set_member", dst_mac=mac, dst_addr=ip)))
    return ents


def measure(topo: Topology, kind: str, args, workdir: Path, loop: AsyncLoop) -> dict:
    """One run: start the switch (echo or aggregate), drive it, return rates."""
    grpc_port = free_tcp_port()
    extra = ("--echo",) if kind == "echo" else ()
    extra += ("--batch", str(args.batch), "--slots", str(max(256, args.window)))
    proc = start_switch_process(topo.ports, grpc_port, workdir / f"{topo.mode}-{topo.n}-{kind}.log", extra)
    client = None
    try:
        if kind == "aggregate":
            client = connect(loop, "bench", grpc_port, p4info_path(workdir))
            loop.run(client.insert(_job_entities(topo, args.window)))
        if args.c_exe is not None:
            tpl = workdir / f"templates-{topo.mode}-{topo.n}.bin"
            length = loadgen.write_templates(tpl, JOB, args.window, [
                {"rank": r, "raw": topo.mode == "veth", "mac": mac, "ip": ip}
                for r, _p, ip, mac in topo.workers], switch_ip=topo.switch_ip)
            cmd = [*topo.prefix, *loadgen.c_command(args.c_exe, tpl, length, args.window, args.seconds,
                                                    args.warmup, args.rto, topo.endpoints)]
        else:
            cmd = [*topo.prefix, sys.executable, "-m", "host.softswitch.loadgen", "--job", str(JOB),
                   "--window", str(args.window), "--seconds", str(args.seconds),
                   "--warmup", str(args.warmup), "--rto", str(args.rto), "--switch-ip", topo.switch_ip,
                   *topo.gen]
        gen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=REPO, env=ENV)
        time.sleep(args.warmup)
        cpu0, t0 = _cpu_s(proc.pid), time.monotonic()
        out, err = gen.communicate(timeout=args.seconds + args.warmup + 60)
        cpu1, t1 = _cpu_s(proc.pid), time.monotonic()
        if gen.returncode:
            raise RuntimeError(f"loadgen failed: {err.strip()[-2000:]}")
        res = json.loads(out.strip().splitlines()[-1])
    finally:
        if client is not None:
            with contextlib.suppress(Exception):   # the switch goes away next anyway
                loop.run(client.__aexit__(None, None, None), timeout=10)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            stop_process(proc)
    pps = res["received"] / res["seconds"]
    cpu = (cpu1 - cpu0) / max(t1 - t0, 1e-9)
    return {"packets_per_s": round(pps), "coords_per_s": round(pps * lay.COORDS_PER_PACKET),
            "switch_cpu": round(cpu, 3),
            "packets_per_cpu_s": round(pps / cpu) if cpu > 0 else None,
            "retransmissions": res["retransmissions"], "rounds_min": res["rounds_min"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="udp,veth", help="udp, veth or both (default %(default)s)")
    ap.add_argument("--workers", default="2,4,8", help="worker counts (default %(default)s)")
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=0.7)
    ap.add_argument("--window", type=int, default=1024,
                    help="slots in flight per worker (a THC chunk of 2^20 coordinates is 4096 "
                         "packets); the switch gets a slot pool this large")
    ap.add_argument("--batch", type=int, default=1024, help="switch receive batch")
    ap.add_argument("--rto", type=float, default=0.25,
                    help="generator retransmission timeout, s (long: a busy machine stalls)")
    ap.add_argument("--generator", choices=("c", "python"), default="c",
                    help="load generator: c (built with cc; falls back to python) or python")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if "veth" in modes and os.geteuid() != 0:
        print("veth runs need root (namespaces); skipping them", file=sys.stderr)
        modes.remove("veth")
    ns = [int(x) for x in args.workers.split(",")]
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"netco-bench-softswitch-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    args.c_exe = loadgen.build_c(workdir) if args.generator == "c" else None
    if args.generator == "c" and args.c_exe is None:
        print("no C compiler: using the Python generator (it may limit the rates)", file=sys.stderr)
    loop = AsyncLoop()
    results = []
    runs = [(m, n) for m in modes for n in ns]
    try:
        for mode, n in tqdm(runs, desc="softswitch bench", disable=args.json, file=sys.stderr):
            topo = Topology(mode, n, f"nb{os.getpid() % 10000}{n}")
            try:
                echo = measure(topo, "echo", args, workdir, loop)
                agg = measure(topo, "aggregate", args, workdir, loop)
            finally:
                topo.close()
            ratio = agg["packets_per_s"] / echo["packets_per_s"] if echo["packets_per_s"] else 0.0
            results.append({"transport": mode, "workers": n, "echo": echo, "aggregate": agg,
                            "ratio": round(ratio, 3), "target_met": ratio >= 0.5})
    finally:
        loop.close()
    report = {"benchmark": "softswitch", "window": args.window, "seconds": args.seconds,
              "generator": "c" if args.c_exe is not None else "python",
              "batch": args.batch, "coords_per_packet": lay.COORDS_PER_PACKET,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "load_avg_1m": round(os.getloadavg()[0], 2)},
              "results": results}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{'transport':9} {'n':>2} {'echo pkt/s':>11} {'agg pkt/s':>10} {'agg coords/s':>13} "
              f"{'ratio':>6} {'sw cpu e/a':>11}")
        for r in results:
            e, a = r["echo"], r["aggregate"]
            print(f"{r['transport']:9} {r['workers']:>2} {e['packets_per_s']:>11} "
                  f"{a['packets_per_s']:>10} {a['coords_per_s']:>13} {r['ratio']:>6.2f} "
                  f"{e['switch_cpu']:>5.2f}/{a['switch_cpu']:<5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
