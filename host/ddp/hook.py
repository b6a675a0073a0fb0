"""THC gradient compression as a DDP communication hook.

Usage, one line after wrapping the model::

    ddp.register_comm_hook(THCHookState(THCConfig()), thc_hook)

Per gradient bucket (THC steps 1-11 as docs/thc.md lists them; Li et al., NSDI 2024):
add the error-feedback memory, compute the per-chunk norms, agree on their maximum across workers
(:meth:`Aggregator.max_floats`, which also carries one "non-finite" flag per rank so every rank
stops together), encode with this rank's rounding randomness and the shared signs keyed by
(step, bucket index), sum the integer table values (:meth:`Aggregator.sum_encoded_async`), and
decode the sum with its contribution count into the averaged bucket.

The shape follows PyTorch's own hooks (a state object plus a function ``hook(state, bucket)``
returning a :class:`torch.futures.Future`, e.g. ``powerSGD_hook``): the first
``start_thc_iter`` steps may run as plain averaging, like PowerSGD's ``start_powerSGD_iter``.
Unlike PowerSGD, the error memory is kept per parameter, not per bucket index, so it survives
DDP rebuilding its buckets after the first iteration and THC can start at step 0.
"""

# No `from __future__ import annotations`: DDP checks the hook's annotations at registration.

import contextlib
import logging
import math
import time
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.distributed as dist

from host.aggregation import Aggregator, Count, TorchDistributedAggregator
from host.thc.codec import NonFiniteError, THCCodec
from host.thc.config import THCConfig
from host.thc.lanes import lane_bits

log = logging.getLogger(__name__)


#: Agreed chunk norms below this are sent as zero chunks (their values stay in the error memory):
#: the scale √d/M overflows float32 for M below about 3e-36. The codec now does the same; the
#: hook keeps its own threshold so its behaviour does not depend on the codec version.
TINY_NORM = 1e-30


class NonFiniteGradientError(FloatingPointError):
    """Some rank's gradient bucket holds NaN or Inf; raised on every rank at the same bucket."""


@dataclass
class StepBytes:
    """Bytes one worker sent and received in one step (THC wire model, ``docs/training.md``)."""

    step: int
    sent: int
    received: int


#: The hook's phases (:meth:`THCHookState.take_phases`, seconds summed over a step's
#: buckets): ``prepare`` (error memory gathered and added), ``norms`` (chunk norms and their
#: agreement across workers), ``encode``, ``network`` (the exchanges' own time on the network
#: thread, overlapped with the codec), ``wait`` (codec thread blocked on the network),
#: ``decode``, ``residual`` (error memory scattered back), ``hook`` (the hook's time on the
#: backward thread: with a pipelined aggregator it only hands the bucket over), ``cpu`` (CPU
#: time of the thread that ran the bucket's work).
PHASES = ("prepare", "norms", "encode", "network", "wait", "decode", "residual", "hook", "cpu")


class THCHookState:
    """State of :func:`thc_hook`: codec, aggregator, error memory, step and byte counters.

    Parameters
    ----------
    config : THCConfig, optional
        Shared by all workers (default: the THC defaults, b=4, g=30).
    aggregator : Aggregator, optional
        How sums and maxima are computed; default :class:`TorchDistributedAggregator` on
        ``process_group`` (created at the first bucket, so the state may be built before
        ``init_process_group``).
    process_group : ProcessGroup, optional
        Used only when no aggregator is given.
    error_feedback : bool
        Carry each worker's compression error into its next step (THC reference, steps 1, 7).
    start_thc_iter : int
        Steps of plain float averaging before THC starts (warm-up; 0 = compress from the start).
    backend : str
        Codec backend (``auto``, ``torch``, ``fused``).
    trace : bool
        Keep, per bucket call, the parameters and the error memory applied (tests, debugging).
    pipelined : bool
        With an aggregator that offers ``reduce_into`` (the in-network
        :class:`~host.transport.job.NetworkAggregator`) and a CPU float32 bucket: hand each
        bucket to one background thread and return at once, so the backward pass goes on
        computing the next buckets while this one is summed; there the bucket's encode,
        exchange and decode are overlapped part by part and the average is decoded straight
        into the bucket. Buckets are summed in the order DDP hands them over, the same on every
        worker; the results are the same as without (bit for bit).

    Attributes
    ----------
    iter : int
        Steps completed (advanced after the last bucket of a step).
    memory : dict
        Error memory per parameter (flat float32), keyed by :meth:`param_key`.
    history : list of StepBytes
        Bytes sent/received by this worker in every completed step.
    bytes_sent, bytes_received : int
        This worker's bytes of the last completed step (readable right after ``backward``:
        the step ends with its last bucket); ``total_bytes_sent``/``total_bytes_received``
        add up every step.
    """

    def __init__(
        self,
        config: THCConfig | None = None,
        *,
        aggregator: Aggregator | None = None,
        process_group: dist.ProcessGroup | None = None,
        error_feedback: bool = True,
        start_thc_iter: int = 0,
        backend: str = "auto",
        trace: bool = False,
        pipelined: bool = True,
    ) -> None:
        if start_thc_iter < 0:
            raise ValueError(f"start_thc_iter={start_thc_iter}: must be >= 0")
        self.codec = THCCodec(config, backend=backend)
        self.aggregator = aggregator
        self.process_group = process_group
        self.error_feedback = error_feedback
        self.start_thc_iter = start_thc_iter
        self.iter = 0
        self.memory: dict[Hashable, torch.Tensor] = {}
        self.bytes_sent = 0
        self.bytes_received = 0
        self._sent = 0          # the current step's, until end_step
        self._received = 0
        self.total_bytes_sent = 0
        self.total_bytes_received = 0
        self.history: list[StepBytes] = []
        self.trace: list[dict] | None = [] if trace else None
        self._keys: dict[int, int] = {}
        self.pipelined = pipelined
        #: The first error of a bucket summed on the background thread (DDP re-raises it as
        #: a RuntimeError from ``backward``; :meth:`raise_error` gives back the original).
        self.error: BaseException | None = None
        self.phases: dict[str, float] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._staging: dict[int, torch.Tensor] = {}
        #: :func:`host.ddp.attach.attach` sets these: the job file, what the start-up check
        #: saw, and that :meth:`close` leaves the job (the aggregator is the state's own)
        self.job = None
        self.check = None
        self.owns_aggregator = False
        self.closed = False
        #: makes the aggregator at the first bucket (:func:`host.ddp.attach.comm_state`)
        self.connect = None

    # ------------------------------------------------------------------ helpers
    def agg(self) -> Aggregator:
        """The aggregator (created on first use: by :attr:`connect` when set, else
        :class:`TorchDistributedAggregator` on the process group)."""
        if self.aggregator is None:
            if self.connect is not None:
                self.aggregator = self.connect()
            else:
                self.aggregator = TorchDistributedAggregator(self.process_group)
        return self.aggregator

    def param_key(self, p: torch.Tensor) -> int:
        """A stable key for parameter ``p``: its first-seen order (independent of buckets)."""
        return self._keys.setdefault(id(p), len(self._keys))

    def count(self, sent: int, received: int) -> None:
        """Add bytes to the current step's counters."""
        self._sent += sent
        self._received += received

    def add_phase(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to phase ``name`` of the current step (:data:`PHASES`)."""
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def take_phases(self) -> dict[str, float]:
        """The phases recorded since the last call (a pipelined bucket's land when it is
        summed, so call this after the step's buckets completed, e.g. after ``backward``)."""
        out, self.phases = self.phases, {}
        return out

    def end_step(self) -> None:
        """Close the current step's byte counters and advance :attr:`iter`."""
        self.history.append(StepBytes(self.iter, self._sent, self._received))
        self.total_bytes_sent += self._sent
        self.total_bytes_received += self._received
        self.bytes_sent, self.bytes_received = self._sent, self._received
        self._sent = self._received = 0
        self.iter += 1

    def bytes_per_bucket(self, numel: int, world_size: int) -> tuple[int, int]:
        """(up, down) bytes of one compressed bucket of ``numel`` elements for one worker.

        Up: packed ``b``-bit indices of the padded coordinates, plus the chunk norms and one
        flag per rank of the maximum agreement (float32). Down: one lane per padded coordinate,
        its width from ``n·g`` (8 bits for ``n·g ≤ 255``, THC reference step 10), plus the
        agreed norms and flags.
        """
        lay = self.codec.layout(numel)
        agree = 4 * (len(lay.chunks) + world_size)
        up = self.codec.payload_bytes(numel) + agree
        lane = lane_bits(world_size, self.codec.cfg.granularity)
        down = math.ceil(lay.padded * lane / 8) + agree
        return up, down

    def uses_pipeline(self, agg: Aggregator, buf: torch.Tensor) -> bool:
        """Whether ``buf`` goes through the background, pipelined path (:attr:`pipelined`):
        a contiguous float32 bucket on the CPU, or on a GPU (staged through pinned host
        memory: the switch's aggregator encodes on the CPU)."""
        return (self.pipelined and hasattr(agg, "reduce_into")
                and buf.device.type in ("cpu", "cuda")
                and buf.dtype == torch.float32 and buf.is_contiguous())

    def host_buffer(self, buf: torch.Tensor) -> torch.Tensor:
        """A pinned host tensor like the GPU bucket ``buf`` (kept per size, reused)."""
        n = buf.numel()
        host = self._staging.get(n)
        if host is None:
            host = self._staging[n] = torch.empty(n, dtype=torch.float32, pin_memory=True)
        return host

    def pool(self) -> ThreadPoolExecutor:
        """The one thread that sums pipelined buckets, in order (created on first use)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="thc-hook")
        return self._pool

    def raise_error(self) -> None:
        """Raise :attr:`error` if a pipelined bucket failed (call where ``backward`` raised)."""
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Stop the background thread (after the last step); with an aggregator of its own
        (:func:`host.ddp.attach.attach`), leave the job too: the closing exchange when every
        step went through, none after an error (bounded by the give-up time either way).
        Runs once; later calls do nothing."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.closed:
            return
        self.closed = True
        if self.owns_aggregator and self.aggregator is not None:
            self.aggregator.close(finish=self.error is None)

    def _segments(self, bucket: dist.GradBucket, buf: torch.Tensor) -> list[tuple[int, int, int]]:
        """(key, offset, numel) of every parameter's gradient inside the bucket buffer."""
        base = buf.storage_offset()
        segs = []
        for p, g in zip(bucket.parameters(), bucket.gradients(), strict=True):
            segs.append((self.param_key(p), g.storage_offset() - base, g.numel()))
        return segs

    def _gather_memory(self, segs: list[tuple[int, int, int]], numel: int,
                       device: torch.device) -> torch.Tensor:
        mem = torch.zeros(numel, dtype=torch.float32, device=device)
        for key, off, n in segs:
            m = self.memory.get(key)
            if m is not None and m.numel() == n:
                mem[off : off + n] = m
        return mem

    def _scatter_memory(self, segs: list[tuple[int, int, int]], residual: torch.Tensor) -> None:
        for key, off, n in segs:
            self.memory[key] = residual[off : off + n].clone()


def _check_finite(state: THCHookState, agg: Aggregator, x: torch.Tensor, bucket_index: int,
                  step: int | None = None) -> torch.Tensor:
    """Agree on the chunk norms and, in the same all-reduce, on which ranks hold NaN/Inf."""
    n, rank = agg.world_size, agg.rank
    local_error = None
    try:
        norms = state.codec.chunk_norms(x).to("cpu", torch.float32)
    except NonFiniteError as exc:
        local_error = str(exc)
        norms = torch.zeros(len(state.codec.layout(x.numel()).chunks), dtype=torch.float32)
    flags = torch.zeros(n, dtype=torch.float32)
    if local_error is not None:
        flags[rank] = 1.0
    agreed = agg.max_floats(torch.cat([norms, flags]))
    bad = [int(r) for r in (agreed[norms.numel():] > 0).nonzero().flatten()]
    if bad:
        here = f"; on this rank: {local_error}" if local_error else ""
        raise NonFiniteGradientError(
            f"THC hook, step {state.iter if step is None else step}, bucket {bucket_index}: "
            f"rank(s) {bad} of {n} passed "
            f"NaN/Inf gradients (raised on rank {rank}){here}"
        )
    agreed = agreed[: norms.numel()].contiguous()
    return torch.where(agreed < TINY_NORM, torch.zeros_like(agreed), agreed)


def thc_hook(state: THCHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average a DDP gradient bucket across workers through THC.

    Parameters
    ----------
    state : THCHookState
    bucket : dist.GradBucket
        DDP's flattened gradient bucket; it is overwritten with the average.

    Returns
    -------
    torch.futures.Future
        Completes with the averaged bucket buffer.

    Raises
    ------
    NonFiniteGradientError
        On every rank, when any rank's bucket holds NaN or Inf.
    """
    agg = state.agg()
    buf = bucket.buffer()
    idx = bucket.index()
    numel = buf.numel()
    n = agg.world_size
    last = bucket.is_last()

    if state.iter < state.start_thc_iter:
        nbytes = numel * buf.element_size()
        state.count(nbytes, nbytes)
        if last:
            state.end_step()

        def average(f: torch.futures.Future[tuple[torch.Tensor, Count]]) -> torch.Tensor:
            sums, count = f.value()
            return buf.copy_(sums / count)

        return agg.sum_floats_async(buf).then(average)

    if state.uses_pipeline(agg, buf):
        return _pipelined_bucket(state, agg, bucket, buf, idx, numel, n, last)

    t0, c0 = time.perf_counter(), time.thread_time()
    segs = state._segments(bucket, buf)
    x = buf.detach().to(torch.float32).reshape(-1)
    if state.error_feedback:
        mem = state._gather_memory(segs, numel, x.device)
        if state.trace is not None:
            state.trace.append({"iter": state.iter, "bucket": idx, "keys": [s[0] for s in segs],
                                "memory": mem.clone()})
        x = x + mem
    t1 = time.perf_counter()
    norms = _check_finite(state, agg, x, idx)
    t2 = time.perf_counter()
    rnd = state.iter
    enc = state.codec.encode(x, norms, worker=agg.rank, round=rnd, stream=idx,
                             residual=state.error_feedback)
    t3 = time.perf_counter()
    if state.error_feedback and enc.residual is not None:
        state._scatter_memory(segs, enc.residual)
    up, down = state.bytes_per_bucket(numel, n)
    state.count(up, down)
    if last:
        state.end_step()
    codec = state.codec
    state.add_phase("prepare", t1 - t0)
    state.add_phase("norms", t2 - t1)
    state.add_phase("encode", t3 - t2)
    state.add_phase("residual", time.perf_counter() - t3)

    def decode(f: torch.futures.Future[tuple[torch.Tensor, Count]]) -> torch.Tensor:
        t = time.perf_counter()
        sums, count = f.value()
        out = codec.decode(sums, count, norms, numel, round=rnd, stream=idx, dtype=buf.dtype)
        state.add_phase("decode", time.perf_counter() - t)
        return buf.copy_(out)

    t4 = time.perf_counter()
    fut = agg.sum_encoded_async(enc, codec)
    state.add_phase("network", time.perf_counter() - t4)   # a synchronous aggregator's sum
    state.add_phase("cpu", time.thread_time() - c0)
    state.add_phase("hook", time.perf_counter() - t0)
    return fut.then(decode)


def _pipelined_bucket(state: THCHookState, agg, bucket: dist.GradBucket, buf: torch.Tensor,
                      idx: int, numel: int, n: int, last: bool,
                      ) -> torch.futures.Future[torch.Tensor]:
    """Hand the bucket to the state's background thread; the future completes with ``buf``
    holding the average. Same steps, same randomness and same result as the synchronous path
    (error memory, norm agreement with the non-finite flags, encode, sum, decode); the sum goes
    through ``agg.reduce_into`` (encode, exchange and decode overlapped part by part, the
    average decoded straight into the bucket)."""
    t_hook = time.perf_counter()
    segs = state._segments(bucket, buf)
    rnd = state.iter
    gpu = buf.device.type == "cuda"
    # a GPU bucket goes to pinned host memory now (DDP may reuse the GPU buffer's stream
    # order: the copy completes before the hook returns) and comes back from the thread
    flat = state.host_buffer(buf).copy_(buf.detach().reshape(-1)) if gpu else \
        buf.detach().reshape(-1)
    up, down = state.bytes_per_bucket(numel, n)
    state.count(up, down)
    if last:
        state.end_step()
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()

    def work() -> None:
        c0 = time.thread_time()
        if state.error is not None:   # an earlier bucket failed: do not wait again
            fut.set_exception(state.error)
            return
        try:
            t0 = time.perf_counter()
            x = flat
            if state.error_feedback:
                mem = state._gather_memory(segs, numel, flat.device)
                if state.trace is not None:
                    state.trace.append({"iter": rnd, "bucket": idx, "keys": [s[0] for s in segs],
                                        "memory": mem.clone()})
                x = flat + mem
            t1 = time.perf_counter()
            norms = _check_finite(state, agg, x, idx, step=rnd)
            t2 = time.perf_counter()
            res = torch.empty_like(x) if state.error_feedback else None
            timing = agg.reduce_into(x, state.codec, norms, flat, round=rnd, stream=idx,
                                     residual=res)
            t3 = time.perf_counter()
            if res is not None:
                state._scatter_memory(segs, res)
            state.add_phase("prepare", t1 - t0)
            state.add_phase("norms", t2 - t1)
            for k in ("encode", "network", "wait", "decode"):
                state.add_phase(k, timing.get(k, 0.0))
            state.add_phase("residual", time.perf_counter() - t3)
            if gpu:
                buf.view(-1).copy_(flat)
            state.add_phase("cpu", time.thread_time() - c0)
            fut.set_result(buf)
        except BaseException as exc:  # handed to DDP through the future
            if state.error is None:
                state.error = exc
            fut.set_exception(exc)

    state.pool().submit(work)
    if last:
        # Wait for the step's buckets here, on the backward thread (DDP waits for them right
        # after the last one anyway): an error then leaves ``backward`` as the hook's own
        # exception. A failed future reaches the user as DDP's "RuntimeError: Unable to cast
        # <message> to Tensor" instead.
        with contextlib.suppress(BaseException):
            fut.wait()
        if state.error is not None:
            raise state.error
    state.add_phase("hook", time.perf_counter() - t_hook)
    return fut
