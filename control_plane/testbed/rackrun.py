"""Jobs that run on a shaped testbed: training comparisons, all-reduce timings.

Each public function here brings up a testbed whose host links are shaped and verified —
``testbed="namespace"`` (default): a :class:`~control_plane.testbed.nsrack.NamespaceRack`
(rootless-capable); ``"mininet"`` or ``"buildings"``: a
:class:`~control_plane.testbed.mnrack.MininetRack` (the Mininet rack or two buildings; root) —
runs its worker processes inside the hosts' namespaces (THC through the switch, the
baselines' gloo traffic routed over the same shaped host links), tears the testbed down and
returns plain data. Call them through :func:`run_on_rack`: a namespace rack must be built
inside a private namespace (:func:`control_plane.testbed.isolate.run_isolated`, rootless when
not root); a Mininet testbed is built in this process.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time

log = logging.getLogger(__name__)

#: ``testbed`` values of the jobs: the namespace rack, the Mininet rack, two buildings.
TESTBEDS = ("namespace", "mininet", "buildings")


def run_on_rack(name: str, **kwargs):
    """Run ``rackrun.<name>(**kwargs)``: on a namespace rack in a private (rootless when
    needed) namespace, on a Mininet testbed here."""
    from control_plane.testbed.isolate import run_isolated

    if kwargs.get("testbed", "namespace") == "namespace":
        return run_isolated(f"{__name__}:{name}", kwargs)
    return globals()[name](**kwargs)


def open_testbed(testbed: str, workers: int, link_mbps: float | None, *,
                 granularity: int = 30, num_slots: int = 64, **options):
    """The shaped testbed ``testbed`` (not yet up) with ``workers`` hosts.

    ``granularity`` (THC's g) and ``num_slots`` (the job's slot window) set the namespace
    rack's job; a Mininet testbed's job comes from its topology file (g = 30 there).
    ``options`` go to :class:`~control_plane.testbed.mnrack.MininetRack` (``target``,
    ``wan_mbps``, ``wan_delay_ms``); a namespace rack takes none.
    """
    if testbed == "namespace":
        from control_plane.testbed.nsrack import NamespaceRack

        if options:
            raise ValueError(f"the namespace rack takes no {', '.join(sorted(options))}")
        return NamespaceRack(workers, link_mbps, granularity=granularity, num_slots=num_slots)
    if granularity != 30:
        raise ValueError(f"the {testbed} testbed's job runs THC with g = 30 (its topology file); "
                         f"drop --granularity {granularity} or use the namespace rack")
    from control_plane.testbed.mnrack import MininetRack

    rack = MininetRack(testbed, link_mbps, **options)
    if rack.workers != workers:
        raise ValueError(f"the {testbed} testbed has {rack.workers} hosts; use {rack.workers} "
                         "workers")
    return rack


def describe(rep: dict) -> str:
    """What the testbed is, then a table of the rates its links measured (Mbit/s)."""
    from host.columns import format_columns

    how = rep.get("target") or ("rootless" if rep.get("rootless") else "root")

    def rate(v: object) -> str:
        return f"{v:.1f}" if isinstance(v, int | float) else "-"

    rows = [(host, rate(m.get("up")), rate(m.get("down")))
            for host, m in sorted((rep.get("measured_mbps") or {}).items())]
    for w in rep.get("wan", []):
        m = w.get("measured") or {}
        dirs = sorted(m)
        rows.append((f"WAN {w['link']} ({w['asked']}, {w['mode']})",
                     *(rate((m.get(d) or {}).get("rate_mbps")) for d in dirs[:2]),
                     *(["-"] * (2 - len(dirs[:2])))))
    head = (f"{rep['kind']} up ({how}): {rep['workers']} hosts, links shaped to "
            f"{rep['link_mbps']:g} Mbit/s; measured rates (up: host to switch):")
    wan = bool(rep.get("wan"))
    table = format_columns(("link", "up" + (" / a->b" if wan else "") + " (Mbit/s)",
                            "down" + (" / b->a" if wan else "") + " (Mbit/s)"), rows)
    return head + "\n" + "\n".join(f"  {line}" for line in table.splitlines())


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
                  thc_pipelined: bool = True, num_slots: int = 64,
                  testbed: str = "namespace", **options) -> dict:
    """Train ``task`` once per compressor spec on one shaped testbed; wall-clock times measured.

    ``specs`` are :class:`host.ddp.baselines.CompressorSpec` fields as dicts; ``testbed`` and
    ``options`` as :func:`open_testbed`. Returns ``{"rack": report, "runs": [harness report,
    ...], "tbf": shaper counters, "switch": switch status}``.
    """
    from host.ddp.baselines import CompressorSpec
    from host.thc.config import THCConfig
    from host.training.harness import TrainConfig, train

    thc_cfg = THCConfig(**(thc or {}))
    with open_testbed(testbed, workers, link_mbps, granularity=thc_cfg.granularity,
                      num_slots=num_slots, **options) as rack:
        rep = rack.report()
        if not quiet:
            _say("\n".join(f"  {line}" for line in describe(rep).splitlines()))
        runs = []
        for sd in specs:
            spec = CompressorSpec(**sd)
            net = rack.network_spec() if spec.kind == "thc" else None
            if not quiet:
                from host.training.report import display_name

                _say(f"  {display_name(spec.label, 'network' if net else None)} on the rack ...")
            t0 = time.perf_counter()
            emb = getattr(rack, "embedded", None)   # the namespace rack's software target
            pid = emb.proc.pid if emb is not None and emb.proc else None
            sw0 = _cpu_seconds(pid)
            r = train(TrainConfig(task=task, spec=spec, workers=workers, steps=steps,
                                  eval_every=eval_every, seed=seed, lr=lr, thc=thc_cfg,
                                  bucket_cap_mb=bucket_cap_mb, progress=progress, network=net,
                                  netns=rack.netns_paths, ifname=rack.ifname,
                                  timeout_s=timeout_s, thc_pipelined=thc_pipelined))
            r["elapsed_s"] = time.perf_counter() - t0
            sw1 = _cpu_seconds(pid)
            # the software target's CPU over the whole run (start-up and evaluations included)
            r["switch_cpu_s"] = sw1 - sw0 if sw0 is not None and sw1 is not None else None
            runs.append(r)
        return {"rack": rep, "runs": runs, "tbf": rack.qdisc_stats(),
                "switch": rack.switch_status()}


def _allreduce_worker(rank: int, world: int, elements: int, repeats: int, spec, seed: int,
                      check: bool, which: tuple[str, ...]) -> dict:
    import torch
    import torch.distributed as dist

    from control_plane.testbed.worker import tensor
    from host.bench.gloo import time_allreduce
    from host.thc.codec import THCCodec

    x = tensor(seed, rank, 0, elements)
    out: dict = {"rank": rank}
    if "gloo" in which:
        out["gloo_s"] = time_allreduce(x, repeats)[0]
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
        # the slot window's counters (retransmissions, stray results, ...) and its RTT estimate
        out["window"] = {**agg.window.stats.as_dict(), "srtt_s": agg.window.srtt}
        out["last_count"] = agg.last_count
        if check:
            out["result"] = first.numpy()
    return out


def allreduce_bench(workers: int, link_mbps: float | None, elements: int, *, repeats: int = 2,
                    seed: int = 0, check: bool = False, which: tuple[str, ...] = ("thc", "gloo"),
                    quiet: bool = False, testbed: str = "namespace", **options) -> dict:
    """All-reduce one ``elements``-long fp32 tensor per worker on a shaped testbed, THC through
    the switch and gloo's ring all-reduce (fp32) over the same links.

    Times are per repeat the slowest rank's (barrier to completion), then the median over
    repeats. With ``check`` each rank's first THC result comes back (``results``).
    ``testbed`` and ``options`` as :func:`open_testbed`.
    """
    from host.training.launch import run_workers

    with open_testbed(testbed, workers, link_mbps, **options) as rack:
        rep = rack.report()
        if not quiet:
            _say("\n".join(f"  {line}" for line in describe(rep).splitlines()))
        spec = rack.network_spec()
        res = run_workers(_allreduce_worker, workers,
                          (elements, repeats, spec, seed, check, tuple(which)),
                          timeout_s=120 + 60 * repeats * max(1.0, elements / 4e6),
                          netns=rack.netns_paths, ifname=rack.ifname)
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
            # per rank, its slot window's counters over all repeats (retransmissions, ...)
            out["thc_window"] = [v["window"] for v in vals]
        if "thc_s" in out and "gloo_s" in out:
            out["speedup"] = out["gloo_s"] / out["thc_s"]
        if check:
            out["results"] = [v["result"] for v in vals]
        out["switch"] = rack.switch_status()
        return out
