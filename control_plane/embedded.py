"""The embedded default network: one software target on loopback, configured over P4Runtime.

What ``netco demo``, ``netco train --aggregator network`` and the transport tests run on a
machine with no switch hardware, no BMv2 and no root: a ``python -m host.softswitch`` process
with one ``udp`` port per worker on 127.0.0.1, a controller file naming each worker as a host
with its own loopback address (127.0.0.11, .12, ...: the target takes a datagram's source
address as the sender's IPv4 address, which the sender-validation entries check), one THC job
over all workers, and :class:`control_plane.controller.Controller` applying it over P4Runtime.
Workers then talk to the target with :class:`host.transport.ports.UdpEndpoint`.

Everything started here is stopped by PID in :meth:`EmbeddedNetwork.stop`.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from control_plane.config import NetworkConfig, parse_config
from control_plane.controller import Controller, run_sync
from host.paths import REPO
from host.protocol import generated_dataplane as dp
from host.protocol import layout as lay
from host.protocol.jobs import widest_width
from host.softswitch.launch import free_port, free_udp_port, start_switch_process, stop_process
from host.thc.table import DEFAULT_GRANULARITY

if TYPE_CHECKING:
    from host.transport.job import NetworkSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerAddress:
    """Where worker ``rank`` sends (``switch``) and what it binds (``ip``, UDP ``port``: the
    job's ``worker_port``, 0 for any)."""

    rank: int
    ip: str
    switch: tuple[str, int]
    port: int = 0


def job_width(workers: int, granularity: int = 30, lane_bits: int = 0) -> int:
    """The widest packet width (docs/protocol.md, "Packet width") a software-target job of
    ``workers`` workers can use: what the application's launchers of the software target
    (``netco demo``, ``netco train`` on the embedded switch, the namespace rack) run, since
    every packet's fixed cost is then spread over 4x the coordinates (1024 with 8-bit lanes)."""
    return widest_width(lane_bits or lay.lane_bits_for(workers, granularity))


def jobs_sharing_hosts(switch_address: str, ips: list[str]) -> Controller:
    """Two jobs (ids 1 and 2) with the same members on one software switch: host ``h{r+1}``
    at ``ips[r]`` on switch port ``r + 1``; installed with ``netco controller apply``'s
    controller, which is returned (its ``tokens`` per job id). The setting of issue 33 (3):
    one job's valid packets from a shared address must not take the other's results.

    Raises
    ------
    RuntimeError
        If the controller could not install the jobs.
    """
    cfg = parse_config({
        "switches": [{"name": "s1", "address": switch_address, "addr": "10.0.0.254",
                      "target": "softswitch"}],
        "hosts": [{"name": f"h{r + 1}", "ip": ip, "attach": f"s1:{r + 1}"}
                  for r, ip in enumerate(ips)],
        "jobs": [{"name": name, "id": jid, "members": [f"h{r + 1}" for r in range(len(ips))]}
                 for name, jid in (("a", 1), ("b", 2))]})
    ctl = Controller(cfg)
    bad = [r for r in run_sync(ctl.apply()) if not r.ok]
    if bad:
        raise RuntimeError(f"controller apply failed: {bad}")
    return ctl


class EmbeddedNetwork:
    """A software switch on loopback with one THC job over ``workers`` workers.

    Parameters
    ----------
    workers : int
        Hosts, one switch port each (ranks 0..workers-1).
    job_id : int
    num_slots : int
        The job's slots (the window of packets in flight per worker).
    thc : dict, optional
        ``{"b", "g", "p"}`` of the job (controller file syntax); default THC's.
    workdir : Path, optional
        Where the switch log and the controller file go (default: a temporary folder).
    echo : bool
        Run the switch as a plain receive-and-send loop (every datagram goes back to where it
        came from): the socket-path limit benchmarks compare with. No controller then.
    in_process : bool
        Run the switch in a thread of this process instead of a ``python -m host.softswitch``
        process: :attr:`switch` is then the :class:`~host.softswitch.switch.SoftSwitch`
        itself (its counters, e.g. for :func:`host.softswitch.metrics.start_switch_metrics`).
        It shares this process's interpreter, so it is slower under load.
    switch_ips, worker_ips : list of str, optional
        Per rank: the address the switch's UDP port binds and the worker's address (default
        127.0.0.1 and 127.0.0.11, .12, ...); a namespace rack gives each worker its own link
        (ports are then picked on 127.0.0.1 of the rack's own, empty, network namespace).
    switch_args : sequence of str
        More options for ``python -m host.softswitch`` (e.g. ``--json``: final statistics in
        the switch log on exit); not for ``in_process``.
    job : dict, optional
        More fields of the job in the controller file (``lane_bits``, ``policy``, ...).
    coords_per_packet : int
        The switch's packet width (``--coords-per-packet``; docs/protocol.md, "Packet width"),
        which every worker's ``JobSpec.coords_per_packet`` must equal (:attr:`coords_per_packet`).
    worker_port : int or None
        The job's ``worker_port`` (docs/security.md, "Members"): the UDP port every worker
        binds, which the switch's sender binding then names, so another process on a member's
        address cannot contribute in its name. None: a free one is picked at :meth:`start`
        (what ``netco demo`` and ``netco train`` run); 0 (default): none, any port of the
        member's address is taken (tests that open their own sockets).
    """

    def __init__(self, workers: int, job_id: int = 1, num_slots: int = 64,
                 thc: dict | None = None, workdir: Path | None = None, echo: bool = False,
                 in_process: bool = False, switch_args: tuple[str, ...] = (),
                 switch_ips: list[str] | None = None, worker_ips: list[str] | None = None,
                 job: dict | None = None, coords_per_packet: int = lay.COORDS_PER_PACKET,
                 worker_port: int | None = 0) -> None:
        if not 1 <= workers <= lay.MAX_WORKERS:
            raise ValueError(f"workers={workers}: need 1..{lay.MAX_WORKERS} (the switch's bitmap)")
        self.workers = workers
        self.coords_per_packet = coords_per_packet
        self.job_id = job_id
        self.num_slots = num_slots
        self.thc = thc
        self.job_extra = dict(job or {})
        #: the job's worker_port (0: none); picked at start when asked for with None
        self.worker_port = int(self.job_extra.pop("worker_port", 0) or 0) or worker_port
        self.echo = echo
        self.switch_args = tuple(switch_args)
        self.switch_ips = list(switch_ips or ["127.0.0.1"] * workers)
        self.worker_ips = list(worker_ips or [f"127.0.0.{11 + r}" for r in range(workers)])
        self.in_process = in_process
        #: the in-process switch (``in_process=True``), else None
        self.switch = None
        self._thread: threading.Thread | None = None
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="netco-embedded-")
        self.workdir = Path(workdir or self._tmp.name)
        self.proc: subprocess.Popen | None = None
        self.grpc_port = 0
        self.ports: list[int] = []
        self.config: NetworkConfig | None = None
        self.controller: Controller | None = None
        self.updates = 0

    @property
    def pool_slots(self) -> int:
        """The switch's slot pool: the P4 program's (``THC_SLOTS``), more if the job needs it."""
        return max(dp.THC_SLOTS, self.num_slots)

    @property
    def log_path(self) -> Path:
        return self.workdir / "switch.log"

    @property
    def token(self) -> int:
        """The job's token (``set_job.token``) the controller installed: every worker's
        ``JobSpec.token``. 0 for an echo switch (no controller)."""
        return self.controller.tokens[self.job_id] if self.controller is not None else 0

    def address(self, rank: int) -> WorkerAddress:
        """Addresses of worker ``rank``."""
        return WorkerAddress(rank, self.worker_ips[rank], (self.switch_ips[rank], self.ports[rank]),
                             self.worker_port or 0)

    def network_spec(self, **kw: object) -> NetworkSpec:
        """The job as every worker reaches it (:class:`~host.transport.job.NetworkSpec`): this
        network's addresses, job id, slots, token, packet width, ``worker_port``, granularity
        and lane width; ``kw`` sets the rest (``round_base``, ``policy``, ``uplink``)."""
        from host.transport.job import NetworkSpec

        addrs = [self.address(r) for r in range(self.workers)]
        fields: dict = {"job_id": self.job_id, "num_slots": self.num_slots, "token": self.token,
                        "coords_per_packet": self.coords_per_packet,
                        "worker_port": self.worker_port or 0,
                        "granularity": int((self.thc or {}).get("g", DEFAULT_GRANULARITY)),
                        "lane_bits": int(self.job_extra.get("lane_bits", 0))}
        fields.update(kw)
        return NetworkSpec(tuple(a.switch for a in addrs), tuple(a.ip for a in addrs), **fields)

    def config_dict(self) -> dict:
        """The controller file of this network (also written to ``workdir/net.yaml``)."""
        job: dict = {"name": "train", "id": self.job_id,
                     "members": [f"w{r}" for r in range(self.workers)],
                     "num_slots": self.num_slots}
        if self.thc:
            job["thc"] = self.thc
        job.update(self.job_extra)
        if self.worker_port:
            job["worker_port"] = self.worker_port
        return {
            "switches": [{"name": "s1", "address": f"127.0.0.1:{self.grpc_port}",
                          "addr": "127.0.0.254", "target": "softswitch",
                          "ports": self.workers}],
            "hosts": [{"name": f"w{r}", "mac": f"02:00:00:00:00:{r + 1:02x}",
                       "ip": self.address(r).ip, "attach": f"s1:{r + 1}"}
                      for r in range(self.workers)],
            "jobs": [job],
        }

    def start(self, timeout: float = 30.0) -> EmbeddedNetwork:
        """Start the switch, wait for its P4Runtime server, apply the controller file."""
        self.grpc_port = free_port(socket.SOCK_STREAM)
        self.ports = [free_port() for _ in range(self.workers)]
        if self.worker_port is None:
            self.worker_port = free_udp_port(also=self.worker_ips)
        try:
            if self.in_process:
                self._start_in_process()
            else:
                self._start_process(timeout)
            return self._configure()
        except BaseException:
            self.stop()   # a bad controller file must not leave the switch running
            raise

    @property
    def config_path(self) -> Path:
        """The controller file of this network on disk (written when it is applied)."""
        return self.workdir / "net.yaml"

    def restart_switch(self, timeout: float = 30.0, apply: bool = True) -> None:
        """Kill the switch process (SIGKILL: a crash, all aggregation state lost), start a new
        one on the same ports and P4Runtime address, and apply the controller file again
        (through :class:`~control_plane.controller.Controller` with the workers' tokens).

        With ``apply=False`` the new switch stays empty: the caller recovers it as an operator
        would, e.g. ``netco controller apply`` on :attr:`config_path` (``benchmarks/chaos.py``).
        """
        if self.proc is None:
            raise RuntimeError("restart_switch: the switch runs in this process (in_process)")
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._start_process(timeout)
        if apply:
            self._configure()

    def _start_process(self, timeout: float) -> None:
        extra = (["--slots", str(self.pool_slots), "--coords-per-packet", str(self.coords_per_packet)]
                 + (["--echo"] if self.echo else []) + list(self.switch_args))
        ports = {r + 1: f"udp:{self.switch_ips[r]}:{p}" for r, p in enumerate(self.ports)}
        self.proc = start_switch_process(ports, self.grpc_port, self.log_path, extra,
                                         timeout=timeout)

    def _start_in_process(self) -> None:
        from host.softswitch.netio import UdpPort
        from host.softswitch.switch import SoftSwitch

        ports = [UdpPort(r + 1, (self.switch_ips[r], p)) for r, p in enumerate(self.ports)]
        self.switch = SoftSwitch(ports, pool_slots=self.pool_slots, coords=self.coords_per_packet)
        self.switch.serve(f"127.0.0.1:{self.grpc_port}")
        self._thread = threading.Thread(target=self.switch.run, kwargs={"echo": self.echo},
                                        daemon=True, name="netco-embedded-switch")
        self._thread.start()

    def _configure(self) -> EmbeddedNetwork:
        """Apply the controller file (not for an echo switch)."""
        if self.echo:
            return self
        raw = self.config_dict()
        import yaml

        self.config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
        self.config = parse_config(raw, base_dir=REPO)
        # after a restart the switch holds nothing: install the tokens the workers hold
        old = self.controller.tokens if self.controller is not None else None
        self.controller = Controller(self.config, tokens=old)
        results = run_sync(self.controller.apply())
        bad = [r for r in results if not r.ok]
        if bad:
            self.stop()
            raise RuntimeError(f"controller apply failed: {[r.to_json() for r in bad]}")
        self.updates = self.controller.writes
        log.info("embedded network: switch %s, %d workers, %d P4Runtime updates",
                 "in process" if self.proc is None else f"pid {self.proc.pid}", self.workers,
                 self.updates)
        return self

    def status(self) -> list:
        """The controller's status of the switch (entries, counters, drops)."""
        assert self.controller is not None
        return run_sync(self.controller.status())

    def stop(self) -> None:
        """Stop the switch process (by PID) or thread and remove the temporary folder."""
        if self.switch is not None:
            self.switch.stop()
            if self._thread is not None:
                self._thread.join(10)
            self.switch.close()
            self.switch = None
            self._thread = None
        stop_process(self.proc)
        self.proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> EmbeddedNetwork:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
