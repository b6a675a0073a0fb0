"""The workloads a :class:`~control_plane.testbed.net.Testbed` drives: all-reduces and workers.

:class:`TestbedWorkloads` is the half of :class:`~control_plane.testbed.net.Testbed` that
uses a running testbed: raw endpoints in the hosts' namespaces, the file's jobs, their THC
codec and slot timing, all-reduces as threads of this process (:meth:`allreduce`) and workers
as processes inside the hosts (:meth:`run_workers`). Bringing the testbed up, verifying its
links and tearing it down live in :mod:`control_plane.testbed.net`.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from control_plane.config import JobSpec as ConfigJob
from control_plane.config import NetworkConfig
from control_plane.testbed.plan import TestbedPlan
from control_plane.testbed.targets import TestbedError, spawn, stop_process
from host.netns import in_netns

__all__ = ["TestbedWorkloads"]


class TestbedWorkloads:
    """Workloads on a testbed that is up (mixed into :class:`~control_plane.testbed.net.Testbed`).

    Uses the testbed's file (``cfg``), plan, work folder, Python, :meth:`node_pid`, and the
    bookkeeping below, which :meth:`~control_plane.testbed.net.Testbed.down` clears.
    """

    __test__ = False  # not a pytest test class

    cfg: NetworkConfig
    plan: TestbedPlan
    workdir: Path
    python: str
    #: endpoints opened by :meth:`endpoint` (closed when the testbed goes down)
    _endpoints: list
    _lock: threading.Lock
    #: jobs that already ran (their slots hold that run's rounds)
    _used_jobs: set[str]

    def node_pid(self, name: str) -> int:
        """PID whose namespaces are node ``name``'s (the testbed provides it)."""
        raise NotImplementedError

    def endpoint(self, host: str, worker_port: int | None):
        """A :class:`host.transport.ports.RawEndpoint` on ``host``'s interface, addressed to its
        attachment switch (opened inside the host's namespace; closed by :meth:`down`); its
        frames leave from UDP port ``worker_port``: the job's, which the switches' sender
        bindings name (None or 0, a job without one: THC's). No default: an endpoint opened
        without the job's port is refused by a job that names one (``BAD_SENDER``)."""
        from host.protocol.layout import THC_UDP_PORT
        from host.transport.ports import RawEndpoint

        h = self.plan.host(host)
        ep = in_netns(self.node_pid(host), lambda: RawEndpoint(
            h.ifname, h.mac, h.gateway_mac, h.ip, h.gateway_ip,
            sport=worker_port or THC_UDP_PORT))
        with self._lock:
            self._endpoints.append(ep)
        return ep

    def job(self, name: str | None = None) -> ConfigJob:
        """The file's job ``name`` (default: the only/first one)."""
        if not self.cfg.jobs:
            raise TestbedError("the topology file defines no jobs")
        if name is None:
            return self.cfg.jobs[0]
        for j in self.cfg.jobs:
            if j.name == name:
                return j
        raise TestbedError(f"no job {name!r}; jobs are {', '.join(j.name for j in self.cfg.jobs)}")

    def _claim(self, jb: ConfigJob) -> None:
        with self._lock:
            if jb.name in self._used_jobs:
                raise TestbedError(
                    f"job {jb.name} already ran on this testbed: its slots hold that run's rounds "
                    "and new workers restart at round 0 (docs/protocol.md), so they would get the old "
                    "results; run several rounds in one call, or bring the testbed up again")
            self._used_jobs.add(jb.name)

    def raw_network_spec(self, job: str | None = None, round_base: int | None = None):
        """How worker processes reach ``job``'s switches: a
        :class:`host.transport.job.RawNetworkSpec` whose rank ``r`` opens its raw socket on
        member ``r``'s interface inside that host. A fresh round base (unless given) keeps each
        session's rounds apart from earlier ones at the switches, so a job may run again."""
        from host.transport.job import RawNetworkSpec, session_round_base

        jb = self.job(job)
        hosts = [self.plan.host(h) for h in jb.members]
        return RawNetworkSpec(tuple(self.node_pid(h.name) for h in hosts),
                              tuple(h.ifname for h in hosts), tuple(h.mac for h in hosts),
                              tuple(h.ip for h in hosts), tuple(h.gateway_mac for h in hosts),
                              tuple(h.gateway_ip for h in hosts), job_id=jb.id,
                              num_slots=jb.num_slots, granularity=jb.thc.g,
                              round_base=round_base or session_round_base(), policy=jb.policy,
                              lane_bits=jb.lane_bits, token=self.tokens.get(jb.id, 0),
                              worker_port=jb.worker_port or 0)

    def path_rtt_ms(self) -> float:
        """Largest round trip any impaired link adds (2 × delay + jitter), for timeouts."""
        return max((2 * (ln.impairment.delay_ms + ln.impairment.jitter_ms)
                    for ln in self.plan.impaired if ln.impairment), default=0.0)

    def codec(self, job: ConfigJob):
        """The THC codec every member of ``job`` uses (same table as the switches)."""
        from host.thc.codec import THCCodec
        from host.thc.config import THCConfig

        return THCCodec(THCConfig(bits=job.thc.b, granularity=job.thc.g, clip_mass=job.thc.p))

    def slot_config(self, job: ConfigJob, **kw):
        """Slot timing for ``job`` on this testbed (timeouts above the impaired round trip)."""
        from host.transport.slots import SlotConfig

        rtt = self.path_rtt_ms() / 1000
        kw.setdefault("rto", 0.02 + 2.5 * rtt)
        kw.setdefault("max_rto", max(0.5, 4 * kw["rto"]))
        kw.setdefault("deadline", 0.5 + 4 * rtt)
        kw.setdefault("policy", job.policy)
        return SlotConfig(**kw)

    def allreduce(self, tensors: Sequence, job: str | None = None, rounds: int = 1,
                  timeout: float = 60.0, **slot_kw) -> list[list]:
        """Every member of ``job`` averages its tensor through the switches, ``rounds`` times.

        ``tensors[r]`` is member ``r``'s tensor, or a callable ``(rank, round) -> tensor``.
        The members run as threads of this process whose raw sockets live in the hosts'
        namespaces, so every frame leaves and enters through the hosts' interfaces. Returns
        ``out[rank][round]``.
        """
        from host.transport.job import JobSpec, NetworkAggregator

        jb = self.job(job)
        codec = self.codec(jb)
        n = len(jb.members)
        self._claim(jb)
        if not callable(tensors) and len(tensors) != n:
            raise TestbedError(f"job {jb.name} has {n} members; got {len(tensors)} tensors")
        outs: list[list] = [[] for _ in range(n)]
        errors: list[BaseException] = []
        eps = [self.endpoint(h, jb.worker_port) for h in jb.members]
        cfg = self.slot_config(jb, **slot_kw)

        def work(rank: int) -> None:
            try:
                agg = NetworkAggregator(eps[rank], JobSpec(jb.id, rank, n, jb.num_slots, jb.thc.g,
                                                                 lane_bits=jb.lane_bits,
                                                                 token=self.tokens.get(jb.id, 0)),
                                        cfg)
                for rnd in range(rounds):
                    t = tensors(rank, rnd) if callable(tensors) else tensors[rank]
                    outs[rank].append(agg.allreduce(t, codec))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(r,), daemon=True) for r in range(n)]
        for t in threads:
            t.start()
        end = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        if any(t.is_alive() for t in threads):
            raise TestbedError(f"job {jb.name}: all-reduce not done after {timeout:g} s")
        if errors:
            raise errors[0]
        return outs

    def run_workers(self, job: str | None = None, size: int = 4096, seed: int = 0, rounds: int = 1,
                    timeout: float = 120.0) -> dict[str, dict[str, Any]]:
        """Run each member as its own process inside its host (``python -m
        control_plane.testbed.worker``) on tensors :func:`~control_plane.testbed.worker.tensor`
        draws from ``seed``; returns host → its JSON summary with ``out`` (a .npy path)."""
        jb = self.job(job)
        self._claim(jb)
        cfg = self.slot_config(jb)
        procs = {}
        for rank, name in enumerate(jb.members):
            h = self.plan.host(name)
            out = self.workdir / f"worker-{name}.npy"
            cmd = [self.python, "-m", "control_plane.testbed.worker", "--ifname", h.ifname,
                   "--src-mac", h.mac, "--dst-mac", h.gateway_mac, "--src-ip", h.ip,
                   "--dst-ip", h.gateway_ip, "--job-id", str(jb.id), "--rank", str(rank),
                   "--world", str(len(jb.members)), "--num-slots", str(jb.num_slots),
                   "--b", str(jb.thc.b), "--g", str(jb.thc.g), "--p", repr(jb.thc.p),
                   "--policy", cfg.policy, "--rto", f"{cfg.rto:g}", "--size", str(size),
                   "--seed", str(seed), "--rounds", str(rounds), "--out", str(out),
                   "--lane-bits", str(jb.lane_bits),
                   "--token", str(self.tokens.get(jb.id, 0)),
                   "--worker-port", str(jb.worker_port or 0)]
            procs[name] = (spawn(cmd, self.workdir / f"worker-{name}.log", ns_pid=self.node_pid(name)), out)
        end = time.monotonic() + timeout
        results: dict[str, dict[str, Any]] = {}
        try:
            for name, (proc, out) in procs.items():
                try:
                    proc.wait(max(0.1, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise TestbedError(f"worker {name} not done after {timeout:g} s") from None
                logp = self.workdir / f"worker-{name}.log"
                if proc.returncode != 0:
                    raise TestbedError(f"worker {name} exited {proc.returncode}: "
                                       f"{logp.read_text()[-1500:]}")
                results[name] = json.loads(out.with_suffix(".json").read_text())
        finally:
            for proc, _ in procs.values():
                stop_process(proc)
        return results

