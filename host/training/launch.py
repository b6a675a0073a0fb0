"""Start N worker processes joined by a gloo process group on this machine.

Rendezvous uses a ``FileStore`` in a fresh temporary directory (no TCP port to race for); gloo
then moves data over loopback. Every rank's return value, or its error, comes back to the
parent; a failing rank does not take the others down, so a test can check that *every* rank
raised. A run that exceeds its deadline is terminated instead of hanging.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from host.netns import enter_netns

log = logging.getLogger(__name__)


@dataclass
class RankResult:
    """What one rank returned, or the error it raised (``"Type: message"``)."""

    rank: int
    value: Any = None
    error: str | None = None
    error_type: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class LaunchTimeoutError(RuntimeError):
    """The workers did not finish before the deadline and were terminated."""


def loopback_env() -> None:
    """Point gloo at the loopback interface unless ``GLOO_SOCKET_IFNAME`` is set."""
    if "GLOO_SOCKET_IFNAME" in os.environ:
        return
    if Path("/sys/class/net/lo").exists():
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    elif sys.platform == "darwin":
        os.environ["GLOO_SOCKET_IFNAME"] = "lo0"


def _entry(rank: int, fn: Callable, world: int, store: str, out_dir: str, timeout_s: float,
           threads: int, args: tuple, netns: tuple[str, ...] | None = None,
           ifname: str | None = None) -> None:
    torch.set_num_threads(threads)
    res = RankResult(rank)
    try:
        if netns is not None:  # this rank's host: gloo and every socket use its interface
            enter_netns(netns[rank])
            if ifname:
                os.environ["GLOO_SOCKET_IFNAME"] = ifname
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
        res.value = fn(rank, world, *args)
    except Exception as exc:  # sent to the parent, which decides
        res.error = f"{type(exc).__name__}: {exc}"
        res.error_type = type(exc).__name__
        log.debug("rank %d failed:\n%s", rank, traceback.format_exc())
    finally:
        try:
            payload = pickle.dumps(res)
        except Exception as exc:  # an unpicklable return value
            payload = pickle.dumps(RankResult(rank, error=f"result not picklable: {exc}",
                                              error_type="PicklingError"))
        Path(out_dir, f"rank{rank}.pkl").write_bytes(payload)
        if dist.is_initialized():
            dist.destroy_process_group()


def run_workers(fn: Callable, world: int, args: tuple = (), *, timeout_s: float = 600.0,
                threads: int = 1, netns: Sequence[str] | None = None,
                ifname: str | None = None) -> list[RankResult]:
    """Run ``fn(rank, world, *args)`` in ``world`` spawned processes sharing a gloo group.

    Parameters
    ----------
    fn : callable
        A module-level function (spawn pickles it by name).
    world : int
        Number of processes.
    timeout_s : float
        Collective timeout inside the group; the processes are killed 60 s after it.
    threads : int
        torch intra-op threads per process.
    netns : sequence of str, optional
        Per rank, the network namespace (a path such as ``/run/netns/h1``) the process enters
        before joining the group, so its traffic leaves through that host's interface.
    ifname : str, optional
        With ``netns``: the interface gloo binds in every namespace (``GLOO_SOCKET_IFNAME``).

    Returns
    -------
    list of RankResult
        One per rank, in rank order.
    """
    if world < 1:
        raise ValueError(f"world={world}: need at least one process")
    if netns is not None and len(netns) < world:
        raise ValueError(f"{len(netns)} network namespaces for {world} processes")
    loopback_env()
    with tempfile.TemporaryDirectory(prefix="netco-ddp-") as tmp:
        store = str(Path(tmp, "store"))
        ctx = mp.start_processes(_entry, args=(fn, world, store, tmp, timeout_s, threads, args,
                                                     tuple(netns) if netns else None, ifname),
                                 nprocs=world, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s + 60
        try:
            # Poll instead of ctx.join(): join() kills every other rank as soon as one exits
            # abnormally, and a rank can abort in teardown (gloo's threads in
            # destroy_process_group when a peer is already gone) after writing its result.
            # The result files decide below; a rank without one is reported as failed.
            while any(p.is_alive() for p in ctx.processes):
                if time.monotonic() > deadline:
                    raise LaunchTimeoutError(f"workers still running after {timeout_s + 60:.0f} s")
                time.sleep(0.2)
                dead = [r for r, p in enumerate(ctx.processes)
                        if not p.is_alive() and p.exitcode and not Path(tmp, f"rank{r}.pkl").exists()]
                if dead:  # crashed before writing a result: the others would wait forever
                    break
            for r, p in enumerate(ctx.processes):
                if not p.is_alive() and p.exitcode:
                    log.warning("rank %d exited with code %s", r, p.exitcode)
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
        out = []
        for r in range(world):
            f = Path(tmp, f"rank{r}.pkl")
            out.append(pickle.loads(f.read_bytes()) if f.exists()
                       else RankResult(r, error="exited without a result", error_type="Missing"))
        return out
