"""Attach THC through a switch to your own DDP model: one call after wrapping it.

::

    ddp = DistributedDataParallel(model)
    state = attach(ddp)          # the job from $NETCO_JOB (netco run sets it)

:func:`attach` takes the rank and world size from ``torch.distributed``, the job from its job
file (:mod:`host.transport.jobfile`: the controller writes it, ``netco run`` hands its path to
every rank in ``NETCO_JOB``), binds the rank's member address, checks the job with the switch
(:func:`host.transport.session.check_job`: token, slot range, packet width, lane width; a
mismatch raises on every rank within about ``check_timeout`` seconds, one line naming the
field and both values), opens a session that no earlier session's packets can count in
(:func:`host.transport.session.open_session`, the candidates agreed over the process group)
and registers :func:`host.ddp.hook.thc_hook`. docs/attach.md has the whole story.

The process group only carries the start-up agreements (a few small tensors, on the GPU for
NCCL); the gradients go through the switch. A switch that stops answering makes every rank
raise :class:`AttachError`'s sibling :class:`host.transport.slots.SlotTimeoutError` (naming
the switch and the last contact) within ``give_up`` seconds, from ``backward`` (DDP wraps it:
:func:`raise_hook_error` gives back the original).
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import socket
import weakref
from typing import Any

import torch
import torch.distributed as dist

from host.ddp.hook import THCHookState, thc_hook
from host.thc.config import THCConfig
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.jobfile import JobFile, JobFileError, load
from host.transport.session import (
    JobCheck,
    JobCheckError,
    check_job,
    first_candidate,
    start_session,
)
from host.transport.slots import SlotConfig

log = logging.getLogger(__name__)

__all__ = ["ENV_GIVE_UP", "AttachError", "attach", "comm_state", "find_member", "join",
           "open_over_group", "raise_hook_error"]

#: Environment variable for :func:`attach`'s ``give_up`` (seconds).
ENV_GIVE_UP = "NETCO_GIVE_UP"
#: Default seconds after which a rank whose switch stopped answering raises.
GIVE_UP_S = 3.0
#: Default seconds the start-up check waits for the switch's answers (a switch that answers
#: ends it sooner: host.transport.session.check_job).
CHECK_TIMEOUT_S = 1.5


class AttachError(RuntimeError):
    """The job cannot start: one line naming the cause (job file, rank, address, the
    switch's answer) and the fix."""


def _device(pg: Any) -> torch.device:
    """Where the process group's collectives take their tensors (CUDA for NCCL)."""
    try:
        backend = dist.get_backend(pg)
    except (RuntimeError, ValueError):
        backend = ""
    if str(backend).lower() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _failed_ranks(ok: bool, rank: int, world: int, pg: Any, dev: torch.device) -> list[int]:
    """Every rank's ``not ok``, agreed over the process group: the ranks that failed."""
    flags = torch.zeros(world, dtype=torch.float32, device=dev)
    flags[rank] = 0.0 if ok else 1.0
    dist.all_reduce(flags, group=pg)
    return [r for r in range(world) if flags[r].item() > 0]


def _give_up(value: float | None) -> float:
    if value is None:
        text = os.environ.get(ENV_GIVE_UP)
        if not text:
            return GIVE_UP_S
        try:
            value = float(text)
        except ValueError:
            raise AttachError(f"{ENV_GIVE_UP}={text!r}: give seconds, e.g. {ENV_GIVE_UP}=3"
                              ) from None
    if not 0.5 <= value <= 3600:
        raise AttachError(f"give_up={value:g}: give 0.5..3600 seconds")
    return value


def slot_config(job: JobFile, give_up: float) -> SlotConfig:
    """The window's timing for ``job``: a rank raises at most ``give_up`` seconds after its
    oldest packet was sent when the switch does not answer (the status request's wait and,
    for the partial policy, the deadline included)."""
    peek = min(0.5, give_up / 5)
    deadline = min(SlotConfig.deadline, give_up / 4)
    # the give-up is judged when a retransmission timer fires: at most max_rto late
    max_rto = min(SlotConfig.max_rto, give_up / 10)
    silent = give_up - peek - max_rto - (deadline if job.policy == "partial" else 0.0)
    return SlotConfig(policy=job.policy, give_up=max(0.1, silent), peek_wait=peek,
                      deadline=deadline, max_rto=max_rto, rto=min(SlotConfig.rto, max_rto))


def _here(ip: str) -> bool:
    """Whether this process can send from ``ip`` (an address of its network namespace)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((ip, 0))
        except OSError:
            return False
    return True


def find_member(job: JobFile, rank: int, local_rank: int | None = None) -> int:
    """Which member of ``job`` the process of torch.distributed rank ``rank`` is.

    Member ``rank`` when its address is on this machine (the members' order is the ranks'
    order: ``torchrun --standalone``, a static rendezvous). Otherwise the rendezvous numbered
    the nodes in another order (``--rdzv-backend c10d`` does): the rank finds itself by
    address, as the ``local_rank``-th (default ``$LOCAL_RANK``) of the members whose address is
    on this machine.

    Raises
    ------
    AttachError
        No member's address is on this machine, or fewer than ``local_rank + 1``.
    """
    if rank < job.world and _here(job.members[rank].ip):
        return rank
    here = [m.rank for m in job.members if _here(m.ip)]
    if local_rank is None:
        try:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        except ValueError:
            local_rank = 0
    if 0 <= local_rank < len(here):
        return here[local_rank]
    m = job.member(rank) if rank < job.world else None
    which = f"member {rank}'s address {m.ip} ({m.host})" if m else f"no member {rank}"
    mine = ", ".join(f"{job.members[i].host} {job.members[i].ip}" for i in here) or "none"
    raise AttachError(
        f"job {job.name} rank {rank}: {which} is not on this machine, and of the members that "
        f"are ({mine}) there is no local rank {local_rank}; run the ranks where their members' "
        f"addresses are, or give the hosts this machine's addresses in the controller's file")


def connect(job: JobFile, rank: int, give_up: float = GIVE_UP_S) -> NetworkAggregator:
    """Member ``rank``'s aggregator of ``job``: its address bound (at the job's
    ``worker_port`` when it names one: the port the switches bound the member to), its
    switch's UDP address as the destination (the round base is set by :func:`open_session`)."""
    from host.transport.ports import UdpEndpoint

    m = job.member(rank)
    try:
        spec = JobSpec(job.job_id, rank, job.world, job.num_slots, job.g, 1, job.uplink,
                       job.lane_bits, job.token, job.coords_per_packet)
    except ValueError as exc:
        raise AttachError(f"job {job.name}: {exc}") from None
    try:
        ep = UdpEndpoint(m.switch_udp, bind=(m.ip, job.worker_port))
    except OSError as exc:
        if job.worker_port and exc.errno == errno.EADDRINUSE:
            raise AttachError(
                f"job {job.name} rank {rank}: UDP port {job.worker_port} of {m.ip} (the job's "
                f"worker_port) is in use by another process or job; end it, or give job "
                f"{job.name} another worker_port in the controller's file") from None
        raise AttachError(
            f"job {job.name} rank {rank}: cannot send from member {m.host}'s address {m.ip} "
            f"({exc.strerror or exc}); run rank {rank} on the machine that has {m.ip}, or give "
            f"{m.host} this machine's address in the controller's file") from None
    return NetworkAggregator(ep, spec, slot_config(job, give_up))


def _job_and_config(job: JobFile | str | os.PathLike | None,
                    config: THCConfig | None) -> tuple[JobFile, THCConfig]:
    try:
        jf = job if isinstance(job, JobFile) else load(job)
    except JobFileError as exc:
        raise AttachError(str(exc)) from None
    if config is None:
        config = THCConfig(bits=jf.b, granularity=jf.g, clip_mass=jf.p)
    elif (config.bits, config.granularity) != (jf.b, jf.g):
        raise AttachError(f"config: b={config.bits}, g={config.granularity} but job {jf.name} "
                          f"was installed with b={jf.b}, g={jf.g}; drop config= or match it")
    return jf, config


def join(jf: JobFile, process_group: Any = None, give_up: float | None = None,
         check_timeout: float = CHECK_TIMEOUT_S) -> tuple[NetworkAggregator, JobCheck]:
    """This rank's aggregator of ``jf``, checked with the switch and in a fresh session: what
    :func:`attach` does before registering the hook (every rank of the process group calls it
    at the same point; the agreements are collectives).

    Raises
    ------
    AttachError
        As :func:`attach`.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise AttachError("attach: torch.distributed is not initialised; call "
                          "torch.distributed.init_process_group first (torchrun sets its "
                          "environment)")
    pg = process_group
    rank, world = dist.get_rank(pg), dist.get_world_size(pg)
    dev = _device(pg)
    if jf.world != world:
        raise AttachError(f"job {jf.name}: {jf.world} members in the job file, {world} ranks in "
                          f"the process group; start as many ranks as the job has members")
    give = _give_up(give_up)

    # every rank connects and checks; a failure anywhere stops every rank
    agg: NetworkAggregator | None = None
    error: str | None = None
    check: JobCheck | None = None
    member = -1
    try:
        member = find_member(jf, rank)
    except AttachError as exc:
        error = str(exc)
    # every member taken by exactly one rank
    chosen = torch.zeros(world, dtype=torch.float32, device=dev)
    if member >= 0:
        chosen[member] = 1.0
    dist.all_reduce(chosen, group=pg)
    twice = [jf.members[i].host for i in range(world) if chosen[i].item() > 1]
    if error is None and twice:
        error = (f"job {jf.name} rank {rank}: member(s) {', '.join(twice)} taken by more than "
                 f"one rank (found by address); give each rank's machine its own member address")
    try:
        if error is None:
            agg = connect(jf, member, give)
            check = check_job(agg, check_timeout)
    except (AttachError, JobCheckError) as exc:
        error = str(exc)
    bad = _failed_ranks(error is None, rank, world, pg, dev)
    if bad:
        if agg is not None:
            agg.close(finish=False)
        raise AttachError(error or f"job {jf.name} rank {rank}: the start-up check failed on "
                                   f"rank(s) {bad}; their error names the cause")
    assert agg is not None and check is not None

    try:
        open_over_group(agg, pg)
    except JobCheckError as exc:
        agg.close(finish=False)
        raise AttachError(str(exc)) from None
    log.info("job %s rank %d: session at round %d (check %.3f s)", jf.name, rank,
             agg.spec.round_base, check.seconds)
    return agg, check


def open_over_group(agg: NetworkAggregator, process_group: Any = None) -> int:
    """Open ``agg``'s session (:func:`host.transport.session.start_session`) with the ranks of
    ``process_group`` agreeing: the first candidate is rank 0's clock (a broadcast), each try's
    outcome an all-reduce. Every rank of the group calls it at the same point; returns the
    session's candidate round.

    Raises
    ------
    JobCheckError
        No candidate went through.
    """
    pg = process_group
    rank, world = dist.get_rank(pg), dist.get_world_size(pg)
    dev = _device(pg)
    base = torch.tensor([first_candidate()], dtype=torch.int64, device=dev)
    dist.broadcast(base, src=dist.get_global_rank(pg, 0) if pg is not None else 0, group=pg)
    return start_session(agg, int(base.item()), agg.window.cfg,
                         lambda ok: bool(_failed_ranks(ok, rank, world, pg, dev)))


def _own(state: THCHookState, jf: JobFile) -> THCHookState:
    state.job = jf
    state.owns_aggregator = True
    ref = weakref.ref(state)
    atexit.register(lambda: (s := ref()) is not None and s.close())
    return state


def attach(model: torch.nn.Module, job: JobFile | str | os.PathLike | None = None, *,
           process_group: Any = None, give_up: float | None = None,
           check_timeout: float = CHECK_TIMEOUT_S, config: THCConfig | None = None,
           **hook_options: Any) -> THCHookState:
    """Send ``model``'s gradients THC-compressed through the job's switch.

    Parameters
    ----------
    model : torch.nn.parallel.DistributedDataParallel
        The wrapped model (anything with ``register_comm_hook``).
    job : JobFile or path, optional
        The job (default: the file named by ``$NETCO_JOB``).
    process_group : ProcessGroup, optional
        Whose rank and size are the job's (default: the default group); it carries only the
        start-up agreements.
    give_up : float, optional
        Seconds after which every rank raises when the switch stops answering (default
        ``$NETCO_GIVE_UP`` or 3). An operator's switch restart must be done (restart plus
        ``netco controller apply``) within it for the job to continue.
    check_timeout : float
        Seconds the start-up check waits for the switch's answers.
    config : THCConfig, optional
        Codec settings; its ``bits``/``granularity`` must be the job's (default: the job's
        b, g, p).
    **hook_options
        More :class:`~host.ddp.hook.THCHookState` options (``error_feedback``, ...).

    Returns
    -------
    THCHookState
        The registered hook's state: byte counters, ``history``, :meth:`~THCHookState.close`
        (also run at exit), and ``job``/``check`` (what the switch showed).

    Raises
    ------
    AttachError
        On every rank: no process group, another world size than the job's members, a job
        file problem, an address this machine does not have, the start-up check (the line
        names the field and both values) or no session could be opened.
    """
    jf, config = _job_and_config(job, config)
    agg, check = join(jf, process_group, give_up, check_timeout)
    state = _own(THCHookState(config, aggregator=agg, **hook_options), jf)
    state.check = check
    model.register_comm_hook(state, thc_hook)
    return state


def comm_state(job: JobFile | str | os.PathLike | None = None, *, process_group: Any = None,
               give_up: float | None = None, check_timeout: float = CHECK_TIMEOUT_S,
               config: THCConfig | None = None, **hook_options: Any) -> THCHookState:
    """A hook state for frameworks that register the hook themselves, e.g. PyTorch
    Lightning's ``DDPStrategy(ddp_comm_state=comm_state(), ddp_comm_hook=thc_hook)``.

    The job file is read now; the rank joins the job (:func:`join`: the start-up check, the
    session) at the first gradient bucket, when the framework has set up the process group.
    Parameters as :func:`attach`.
    """
    jf, config = _job_and_config(job, config)
    state = _own(THCHookState(config, **hook_options), jf)

    def connect_now() -> NetworkAggregator:
        agg, state.check = join(jf, process_group, give_up, check_timeout)
        return agg

    state.connect = connect_now
    return state


def raise_hook_error(state: THCHookState, exc: BaseException) -> None:
    """Re-raise the hook's own error (a :class:`~host.transport.slots.SlotTimeoutError`
    naming the switch, a :class:`~host.ddp.hook.NonFiniteGradientError`) in place of the
    RuntimeError DDP made of it; re-raise ``exc`` when the hook had none."""
    if state.error is not None:
        raise state.error from None
    raise exc
