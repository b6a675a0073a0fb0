"""Jobs that run on a shaped namespace rack: training comparisons, all-reduce timings.

Each public function here builds a :class:`~control_plane.testbed.nsrack.NamespaceRack`, runs
its worker processes inside the rack's host namespaces (THC through the software target, the
baselines' gloo traffic routed by the switch namespace's kernel, all over the same shaped host
links), tears the rack down and returns plain data. They must run inside a private namespace:
call them through :func:`run_on_rack`, which uses
:func:`control_plane.testbed.isolate.run_isolated` (rootless when not root).
"""

from __future__ import annotations

import logging
import statistics
import sys
import time

log = logging.getLogger(__name__)


def run_on_rack(name: str, **kwargs):
    """Run ``rackrun.<name>(**kwargs)`` in a private (rootless when needed) namespace."""
    from control_plane.testbed.isolate import run_isolated

    return run_isolated(f"{__name__}:{name}", kwargs)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``), or None."""
    import os
    from pathlib import Path

    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def train_compare(task: str, workers: int, link_mbps: float | None, specs: list[dict], *,
                  steps: int | None = None, eval_every: int | None = None, seed: int = 0,
                  lr: float | None = None, bucket_cap_mb: float = 25.0, thc: dict | None = None,
                  progress: bool = False, quiet: bool = False, timeout_s: float = 1800.0,
                  thc_pipelined: bool = True, num_slots: int = 64) -> dict:
    """Train ``task`` once per compressor spec on one shaped rack; wall-clock times measured.

    ``specs`` are :class:`host.ddp.baselines.CompressorSpec` fields as dicts. Returns
    ``{"rack": report, "runs": [harness report, ...], "tbf": shaper counters}``.
    """
    from control_plane.testbed.nsrack import NamespaceRack
    from host.ddp.baselines import CompressorSpec
    from host.thc.config import THCConfig
    from host.training.harness import TrainConfig, train

    thc_cfg = THCConfig(**(thc or {}))
    with NamespaceRack(workers, link_mbps, granularity=thc_cfg.granularity,
                       num_slots=num_slots) as rack:
        rep = rack.report()
        if not quiet:
            _say(f"  namespace rack up ({'rootless' if rep['rootless'] else 'root'}): {workers} "
                 f"hosts, links {link_mbps} Mbit/s, measured {rep['measured_mbps']}")
        runs = []
        for sd in specs:
            spec = CompressorSpec(**sd)
            net = rack.network_spec() if spec.kind == "thc" else None
            if not quiet:
                _say(f"  {spec.label} on the rack ...")
            t0 = time.perf_counter()
            pid = rack.embedded.proc.pid if rack.embedded and rack.embedded.proc else None
            sw0 = _cpu_seconds(pid)
            r = train(TrainConfig(task=task, spec=spec, workers=workers, steps=steps,
                                  eval_every=eval_every, seed=seed, lr=lr, thc=thc_cfg,
                                  bucket_cap_mb=bucket_cap_mb, progress=progress, network=net,
                                  netns=rack.netns_paths, timeout_s=timeout_s,
                                  thc_pipelined=thc_pipelined))
            r["elapsed_s"] = time.perf_counter() - t0
            sw1 = _cpu_seconds(pid)
            # the software target's CPU over the whole run (start-up and evaluations included)
            r["switch_cpu_s"] = sw1 - sw0 if sw0 is not None and sw1 is not None else None
            runs.append(r)
        status = [s.to_json() for s in rack.embedded.status()] if rack.embedded else []
        return {"rack": rep, "runs": runs, "tbf": rack.qdisc_stats(), "switch": status}


def _allreduce_worker(rank: int, world: int, elements: int, repeats: int, spec, seed: int,
                      check: bool, which: tuple[str, ...]) -> dict:
    import torch
    import torch.distributed as dist

    from control_plane.testbed.worker import tensor
    from host.thc.codec import THCCodec

    x = tensor(seed, rank, 0, elements)
    out: dict = {"rank": rank}
    if "gloo" in which:
        times = []
        for _ in range(repeats):
            y = x.clone()
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(y)
            times.append(time.perf_counter() - t0)
        out["gloo_s"] = times
    if "thc" in which:
        codec = THCCodec()
        agg = spec.connect(rank, world)
        times, first, ok = [], None, False
        try:
            for _ in range(repeats):
                dist.barrier()
                t0 = time.perf_counter()
                res = agg.allreduce(x, codec)
                times.append(time.perf_counter() - t0)
                if first is None:
                    first = res
            ok = True
        finally:
            agg.close(finish=ok)   # the closing exchange (docs/transport.md)
        out["thc_s"] = times
        # the codec alone on the same tensor (norms, encode, decode; no network): what the
        # all-reduce costs without any transport, on the same loaded CPU
        ctimes = []
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            norms = codec.chunk_norms(x)
            enc = codec.encode(x, norms, worker=rank, round=0, stream=0)
            t1 = time.perf_counter()
            sums = torch.zeros(enc.layout.padded, dtype=torch.int32)
            t2 = time.perf_counter()
            codec.decode(sums, world, norms, x.numel(), round=0, stream=0)
            ctimes.append(t1 - t0 + time.perf_counter() - t2)
        out["codec_s"] = ctimes
        out["bytes_sent"], out["bytes_received"] = agg.bytes_sent, agg.bytes_received
        out["last_count"] = agg.last_count
        if check:
            out["result"] = first.numpy()
    return out


def allreduce_bench(workers: int, link_mbps: float | None, elements: int, *, repeats: int = 2,
                    seed: int = 0, check: bool = False, which: tuple[str, ...] = ("thc", "gloo"),
                    quiet: bool = False) -> dict:
    """All-reduce one ``elements``-long fp32 tensor per worker on a shaped rack, THC through the
    switch and gloo's ring all-reduce (fp32) over the same links.

    Times are per repeat the slowest rank's (barrier to completion), then the median over
    repeats. With ``check`` each rank's first THC result comes back (``results``).
    """
    from control_plane.testbed.nsrack import NamespaceRack
    from host.training.launch import run_workers

    with NamespaceRack(workers, link_mbps) as rack:
        rep = rack.report()
        if not quiet:
            _say(f"  namespace rack up: {workers} hosts, links {link_mbps} Mbit/s, "
                 f"measured {rep['measured_mbps']}")
        spec = rack.network_spec()
        res = run_workers(_allreduce_worker, workers,
                          (elements, repeats, spec, seed, check, tuple(which)),
                          timeout_s=120 + 60 * repeats * max(1.0, elements / 4e6),
                          netns=rack.netns_paths, ifname="eth0")
        bad = {r.rank: r.error for r in res if not r.ok}
        if bad:
            raise RuntimeError(f"all-reduce workers failed: {bad}")
        vals = [r.value for r in res]
        out: dict = {"link_mbps": link_mbps, "workers": workers, "elements": elements,
                     "repeats": repeats, "rack": rep, "tbf": rack.qdisc_stats()}
        for key in ("thc_s", "gloo_s", "codec_s"):
            if key in vals[0]:
                per_repeat = [max(v[key][i] for v in vals) for i in range(repeats)]
                out[key] = statistics.median(per_repeat)
                out[key + "_all"] = per_repeat
        if "thc_s" in out:
            out["thc_bytes_sent"] = vals[0]["bytes_sent"] // repeats
            out["thc_bytes_received"] = vals[0]["bytes_received"] // repeats
            out["min_count"] = min(v["last_count"] for v in vals)
        if "thc_s" in out and "gloo_s" in out:
            out["speedup"] = out["gloo_s"] / out["thc_s"]
        if check:
            out["results"] = [v["result"] for v in vals]
        if rack.embedded is not None:
            out["switch"] = [s.to_json() for s in rack.embedded.status()]
        return out
