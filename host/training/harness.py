"""Train a task with N worker processes on one machine, one compressor per run.

Workers are ``torch.multiprocessing`` processes joined by gloo over loopback (a ``FileStore``
rendezvous in a temporary directory, so no port is raced for). Each wraps the task's model in
``DistributedDataParallel``, registers the compressor's communication hook, and trains for a
fixed number of steps with deterministic batches. Rank 0 records, per step: the loss averaged
over workers, the held-out metric (every ``eval_every`` steps), the bytes this worker sent and
received as the compressor transmits them, the step's wall time split into communication
(time some all-reduce was in flight) and compute (the rest, including encode/decode), and the
worker process's CPU time in the step (``cpu_s``), which other load on a shared machine does not
inflate.

A rank that fails (e.g. NaN gradients) writes its error and exits cleanly; the parent raises
:class:`TrainingError` with every rank's message. A run that exceeds ``timeout_s`` is killed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from host.aggregation import CollectiveMeter
from host.ddp.baselines import CompressorSpec, make_hook
from host.ddp.hook import THCHookState
from host.thc.config import THCConfig
from host.training.launch import LaunchTimeoutError, run_workers
from host.training.tasks import make_task
from host.transport.job import NetworkSpec, RawNetworkSpec

log = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """One or more worker processes failed; the message holds every rank's error."""

    def __init__(self, message: str, errors: dict[int, str]) -> None:
        super().__init__(message)
        self.errors = errors


@dataclass
class TrainConfig:
    """One training run.

    Parameters
    ----------
    task : str
        ``digits`` or ``charlm``.
    spec : CompressorSpec
        The compressor.
    workers : int
        Worker processes (the data-parallel group size).
    steps, eval_every : int, optional
        Default: the task's.
    seed : int
        Model initialisation, batches and compressor randomness.
    lr : float, optional
        Learning rate (default: the task's).
    thc : THCConfig, optional
        THC parameters (default: THC defaults).
    bucket_cap_mb : float
        DDP bucket size.
    threads : int
        torch intra-op threads per worker.
    progress : bool
        Progress on stderr (rank 0): a tqdm bar on a terminal, plain lines otherwise.
    inject_nan : tuple of int, optional
        (rank, step): that rank's loss becomes NaN at that step (tests and demonstrations).
    network : NetworkSpec, optional
        Sum THC through a switch (:mod:`host.transport`) instead of ``torch.distributed``;
        bytes are then the datagrams each worker really sent and received (headers included).
    timeout_s : float
        Kill the workers after this long; also the collectives' timeout.
    netns : tuple of str, optional
        Per rank, the network namespace its process runs in (a shaped testbed's hosts); gloo
        then binds ``ifname`` there, so the baselines' traffic crosses the hosts' links too.
    ifname : str
        The hosts' interface (with ``netns``).
    metrics_port : int, optional
        With ``network``: each worker serves its aggregation statistics in the Prometheus
        text format at ``http://metrics_address:metrics_port+rank/metrics``
        (:mod:`host.transport.metrics`) while it trains.
    metrics_address : str
        Address the workers' metrics servers bind (default loopback).
    thc_pipelined : bool
        THC through a switch: sum each bucket on a background thread, encode, exchange and
        decode overlapped (:class:`host.ddp.hook.THCHookState`, ``pipelined``); False runs
        every bucket synchronously in the backward pass (for comparison).
    """

    task: str
    spec: CompressorSpec = field(default_factory=lambda: CompressorSpec("thc"))
    workers: int = 2
    steps: int | None = None
    eval_every: int | None = None
    seed: int = 0
    lr: float | None = None
    thc: THCConfig | None = None
    bucket_cap_mb: float = 25.0
    threads: int = 1
    progress: bool = False
    inject_nan: tuple[int, int] | None = None
    timeout_s: float = 900.0
    network: NetworkSpec | RawNetworkSpec | None = None
    netns: tuple[str, ...] | None = None
    ifname: str = "eth0"
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    thc_pipelined: bool = True


def _train(rank: int, cfg: TrainConfig) -> dict:
    n = cfg.workers
    task = make_task(cfg.task, seed=cfg.seed, lr=cfg.lr)
    steps = cfg.steps or task.default_steps
    eval_every = cfg.eval_every or task.default_eval_every
    model = task.build_model()
    n_params = sum(p.numel() for p in model.parameters())
    ddp = DistributedDataParallel(model, bucket_cap_mb=cfg.bucket_cap_mb)
    agg = cfg.network.connect(rank, n) if cfg.network is not None else None
    if agg is not None:
        # above every round an earlier run left on the switch, however long ago
        # (docs/protocol.md, "Sessions"); the ranks agree over their process group
        from host.ddp.attach import open_over_group

        try:
            open_over_group(agg)
        except BaseException:
            agg.close(finish=False)
            raise
    exporter = None
    if agg is not None and cfg.metrics_port is not None:
        from host.transport.metrics import start_worker_metrics

        exporter = start_worker_metrics([agg], cfg.metrics_port + rank if cfg.metrics_port else 0,
                                        cfg.metrics_address)
    state, hook = make_hook(cfg.spec, seed=cfg.seed, thc_config=cfg.thc, aggregator=agg,
                            thc_pipelined=cfg.thc_pipelined)
    wire = (0, 0)
    ddp.register_comm_hook(state, hook)
    opt = task.build_optimizer(ddp.parameters())
    sched = task.build_scheduler(opt, steps)
    meter = CollectiveMeter().install()
    comm_before = 0.0
    records: list[dict] = []
    bar = None
    if rank == 0 and cfg.progress:
        from host.training.progress import Progress

        bar = Progress(steps, f"{cfg.task}/{cfg.spec.label}")
    failed = False
    try:
        for step in range(steps):
            x, y = task.batch(step, rank, n)
            meter.take()
            t0, c0 = time.perf_counter(), time.process_time()
            opt.zero_grad(set_to_none=True)
            loss = task.loss(ddp, x, y)
            if cfg.inject_nan is not None and cfg.inject_nan == (rank, step):
                loss = loss * float("nan")
            try:
                loss.backward()
            except RuntimeError:
                if isinstance(state, THCHookState):  # the hook's own error, not DDP's wrapper
                    state.raise_error()
                raise
            opt.step()
            sched.step()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            nbytes, comm = meter.take()
            if agg is not None:  # what really went over the wire this step
                sent, recv = agg.bytes_sent - wire[0], agg.bytes_received - wire[1]
                wire = (agg.bytes_sent, agg.bytes_received)
                comm = agg.window.stats.seconds - comm_before
                comm_before = agg.window.stats.seconds
            elif isinstance(state, THCHookState):
                sent, recv = state.history[-1].sent, state.history[-1].received
            else:
                sent = recv = nbytes
            # Instrumentation outside the measured step: mean loss over workers.
            lt = torch.tensor([float(loss.detach())], dtype=torch.float64)
            dist.all_reduce(lt)
            meter.take()
            rec = {"step": step + 1, "loss": float(lt) / n, "metric": None, "eval_loss": None,
                   "bytes_sent": int(sent), "bytes_received": int(recv),
                   "compute_s": max(wall - comm, 0.0), "comm_s": comm, "wall_s": wall,
                   "cpu_s": cpu}
            if isinstance(state, THCHookState):  # where the hook's time went (docs/training.md)
                rec["phases"] = {k: round(v, 6) for k, v in state.take_phases().items()}
            if (step + 1) % eval_every == 0 or step + 1 == steps:
                if rank == 0:
                    ev = task.evaluate(model)
                    rec["metric"], rec["eval_loss"] = ev.metric, ev.loss
                    if bar is not None:
                        bar.show(**{task.metric_name: f"{ev.metric:.4f}"})
                # every rank starts the next step together: the others' forward and backward
                # must not run while rank 0 evaluates (on a shared CPU that would hide compute
                # from rank 0's measured step)
                dist.barrier()
            records.append(rec)
            if bar is not None:
                bar.update(1)
    except BaseException:
        failed = True
        raise
    finally:
        meter.uninstall()
        if bar is not None:
            bar.close()
        if isinstance(state, THCHookState):
            state.close()
        if agg is not None:   # the closing exchange (H3) unless this worker failed
            agg.close(finish=not failed)
        if exporter is not None:
            exporter.close()
    return {"task": cfg.task, "compressor": cfg.spec.label, "workers": n, "steps": steps,
            "aggregator": "network" if agg is not None else "torch.distributed",
            "network_stats": agg.window.stats.as_dict() if agg is not None else None,
            "eval_every": eval_every, "seed": cfg.seed, "params": n_params,
            "metric_name": task.metric_name, "higher_is_better": task.higher_is_better,
            "default_target": task.default_target, "records": records}


def _worker(rank: int, world: int, cfg: TrainConfig) -> dict | None:
    report = _train(rank, cfg)
    return report if rank == 0 else None


def train(cfg: TrainConfig) -> dict:
    """Run ``cfg`` with ``cfg.workers`` processes and return rank 0's report.

    Raises
    ------
    TrainingError
        If any rank failed (the message lists each rank's error) or the run timed out.
    """
    if cfg.workers < 1:
        raise ValueError(f"workers={cfg.workers}: must be >= 1")
    try:
        results = run_workers(_worker, cfg.workers, (cfg,), timeout_s=cfg.timeout_s,
                              threads=cfg.threads, netns=cfg.netns,
                              ifname=cfg.ifname if cfg.netns else None)
    except LaunchTimeoutError as exc:
        raise TrainingError(str(exc), {r: "timeout" for r in range(cfg.workers)}) from exc
    errors = {r.rank: r.error for r in results if not r.ok}
    if errors:
        lines = "; ".join(f"rank {r}: {e}" for r, e in sorted(errors.items()))
        raise TrainingError(f"{len(errors)} of {cfg.workers} workers failed: {lines}", errors)
    report = results[0].value
    report["config"] = {"spec": asdict(cfg.spec), "lr": cfg.lr,
                        "thc": (cfg.thc or THCConfig()).describe() if cfg.spec.kind == "thc" else None}
    return report
