"""A worker's handle on one in-network THC job: norm agreement, data, decode.

:class:`NetworkAggregator` implements the :class:`host.aggregation.Aggregator` interface the DDP
hook uses, over a switch (BMv2, the software target, Tofino) instead of ``torch.distributed``:
``max_floats`` travels as NORM messages (the switch keeps the maximum), ``sum_encoded`` ships
the packed 4-bit THC payload as DATA messages and receives the integer lane sums with their
contribution counts (THC reference, steps 3 and 9). :meth:`NetworkAggregator.allreduce` runs the
whole THC round for one tensor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from host.protocol.jobs import lane_problem, width_problem
from host.protocol.layout import (
    COORDS_PER_PACKET,
    INDEX_BITS,
    MAX_WORKERS,
    NORMS,
    NORMS_PER_PACKET,
    ROUND_MASK,
    THC_HEADER_BYTES,
    THC_UDP_PORT,
    VALUE_BITS,
    MsgType,
    lane_bits_for,
)
from host.thc.codec import Encoded, THCCodec
from host.thc.feedback import ErrorFeedback
from host.thc.layout import Segment, split_layout
from host.thc.packing import packed_size
from host.transport.ports import Endpoint
from host.transport.slots import SlotConfig, SlotTimeoutError, SlotWindow

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class JobSpec:
    """What a worker must know of its job (the controller installs the same at the switch).

    Parameters
    ----------
    job_id : int
    rank : int
        This worker's rank, 0..world-1 (≤ 31: the switch's bitmap).
    world : int
        Workers in the job.
    num_slots : int
        Slots the job owns at the switch: the window of packets in flight.
    granularity : int
        THC g: fixes the lane width from ``world·g``.
    round_base : int
        First round number of every slot, the same on all workers of a session. A switch keeps
        each slot's last round and treats an older or equal one as a retransmission, so a new
        session on a switch that served the job before must start above the rounds used then
        (serial-number arithmetic mod 2⁴⁸): :func:`session_round_base` derives one from the
        clock, for launchers to hand to every worker.
    uplink : {"indices", "values"}
        What DATA carries (docs/protocol.md): ``"indices"``, the 4-bit THC indices that the
        switch maps through the job's table (BMv2, the software target); ``"values"``, the
        table values L[q] in 8-bit lanes, which the switch adds as packed words without a
        lookup (what the Tofino program needs; 8 bits per coordinate instead of 4). The
        results are the same integer sums either way.
    lane_bits : int
        Width of the result lanes the controller installed for the job (its ``lane_bits``;
        0: the narrowest that holds ``world·granularity``, which is also the controller's
        default). Checked with :func:`host.protocol.jobs.lane_problem`, the controller's rule;
        a RESULT with another width raises :class:`~host.transport.slots.LaneMismatchError`
        instead of being decoded as garbage (issue 16, S2).
    token : int
        The job's secret token (``set_job.token``, drawn by the controller when it first
        installs the job: :attr:`control_plane.controller.Controller.tokens`). Every packet
        carries it; the switch drops contributions with another, and the worker ignores
        results with another (issue 16). 1..2³²−1: 0 is refused here and by every switch
        (issue 33, 7).
    coords_per_packet : int
        Coordinates per DATA and RESULT packet: the switch's packet width (docs/protocol.md,
        "Packet width"). 256 for every target (BMv2 and Tofino take nothing else); the
        software target started with ``--coords-per-packet`` 512 or 1024 takes that width
        instead. Checked against the lanes with :func:`host.protocol.jobs.width_problem`, the
        switch's rule; a switch of another width drops the packets (MALFORMED or SHORT).
    """

    job_id: int
    rank: int
    world: int
    num_slots: int = 64
    granularity: int = 30
    round_base: int = 1
    uplink: str = "indices"
    lane_bits: int = 0
    token: int = 0
    coords_per_packet: int = COORDS_PER_PACKET

    def __post_init__(self) -> None:
        if not 0 < self.token <= 0xFFFFFFFF:
            raise ValueError(f"token={self.token}: give the job's token from its job file "
                             "(32 bits, never 0: a switch refuses a job with token 0)")
        if not 0 <= self.rank < self.world <= MAX_WORKERS:
            raise ValueError(f"rank={self.rank}, world={self.world}: need 0 <= rank < world <= {MAX_WORKERS}")
        if self.uplink not in UPLINKS:
            raise ValueError(f"uplink={self.uplink!r}: use one of {', '.join(UPLINKS)}")
        if not self.lane_bits:
            object.__setattr__(self, "lane_bits", lane_bits_for(self.world, self.granularity))
        why = lane_problem(self.lane_bits, self.world, self.granularity)
        if why is not None:
            raise ValueError(f"lane_bits={why}")
        why = width_problem(self.coords_per_packet, self.lane_bits)
        if why is not None:
            raise ValueError(f"coords_per_packet={why}")

    @property
    def sums_dtype(self) -> np.dtype:
        """The lane sums' type on the host: as wide as a result lane (uint8, uint16 or
        uint32), so that the lanes land in them by a copy (8-bit lanes) or a byte swap, not
        widened to 32 bits (the decoder reads every unsigned width; docs/transport.md)."""
        return np.dtype(f"u{self.lane_bits // 8}")


#: What DATA packets may carry (JobSpec.uplink).
UPLINKS = ("indices", "values")


def uplink_values(packed: np.ndarray, table: np.ndarray) -> np.ndarray:
    """THC table values of packed 4-bit indices, one byte per coordinate (values uplink).

    ``packed`` holds two indices per byte, the even element in the high nibble (THC step 8);
    the result has twice as many bytes, ``table[index]`` each (Li et al., NSDI 2024, step 9
    moved to the worker so that the switch only adds). Values must fit 8 bits (g ≤ 255).
    """
    t = np.asarray(table, dtype=np.int64)
    if t.size and int(t.max()) >= 1 << VALUE_BITS:
        raise ValueError(f"values uplink: table values up to {int(t.max())} do not fit 8 bits")
    byte = np.arange(256)
    pair = np.stack([t[byte >> 4], t[byte & 0x0F]], axis=1).astype(np.uint8)   # (256, 2)
    return pair[np.asarray(packed, dtype=np.uint8)].reshape(-1)


def session_round_base(now_us: int | None = None) -> int:
    """A round base for a new session: the clock in µs modulo 2⁴⁸ (rounds are 48-bit,
    :data:`host.protocol.layout.ROUND_BITS`; never 0).

    A slot completes at most one round per round trip (tens of µs at least), so a session that
    starts later than another always starts above every round the earlier one used, as long
    as they are less than 2⁴⁷ µs (4.46 years) apart (:func:`host.transport.session.start_session`
    moves past copies that are ahead of the clock).
    """
    if now_us is None:
        now_us = time.time_ns() // 1000
    return (now_us & ROUND_MASK) or 1


def _per_coordinate(counts: np.ndarray, coords: int) -> np.ndarray:
    """Each packet's contribution count repeated for its ``coords`` coordinates (one strided
    copy: half the time of ``np.repeat``, which the partial policy pays on every exchange)."""
    return np.broadcast_to(counts[:, None], (counts.size, coords)).reshape(-1)


def _empty_f32(n: int) -> torch.Tensor:
    """An uninitialised float32 tensor of ``n`` elements allocated by numpy, which asks the
    kernel for transparent huge pages on large buffers (torch's allocator does not): a 64 MB
    result then costs 32 page faults instead of 16,384."""
    return torch.from_numpy(np.empty(n, dtype=np.float32))


def _done(value: object) -> torch.futures.Future:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(value)
    return fut


class NetworkAggregator:
    """Aggregation through a switch for one worker of one job.

    Parameters
    ----------
    endpoint : Endpoint
        :class:`~host.transport.ports.UdpEndpoint` or :class:`~host.transport.ports.RawEndpoint`.
    spec : JobSpec
    slots : SlotConfig, optional
        Timeouts and the ``exact``/``partial`` policy.
    pipeline_coords : int
        :meth:`allreduce` cuts a tensor into parts of about this many coordinates and
        overlaps them: part i + 1 is encoded (and part i - 1 decoded) while part i is on the
        wire, its exchange running in C with the GIL released on a network thread. 0 turns
        it off (one encode, one exchange, one decode). The results are bit-identical.
    """

    #: Tensor sizes whose wire buffers :meth:`reduce_into` keeps (see ``_wire``).
    WIRE_SIZES = 8

    #: Default part size of the pipelined all-reduce (coordinates; 4096 packets of 256).
    PIPELINE_COORDS = 1 << 20

    def __init__(self, endpoint: Endpoint, spec: JobSpec, slots: SlotConfig | None = None,
                 pipeline_coords: int | None = None) -> None:
        self.ep = endpoint
        self.pipeline_coords = self.PIPELINE_COORDS if pipeline_coords is None else pipeline_coords
        #: seconds of the last allreduce: {"norms", "encode", "network", "decode", "total"}
        #: (encode/decode: time spent in the codec on the calling thread; network: the
        #: exchanges' own time on the network thread, overlapped with the codec when pipelined)
        self.last_timing: dict[str, float] = {}
        self.spec = spec
        self.window = SlotWindow(endpoint, spec.job_id, spec.rank, spec.world, spec.num_slots, slots,
                                 round_base=spec.round_base, token=spec.token)
        self._round = 0
        #: Contribution count of the last sum (int, or the minimum over packets when partial).
        self.last_count: int = spec.world
        self.bytes_sent = 0
        self.bytes_received = 0
        #: tensor elements summed through the switch (the goodput's numerator)
        self.coordinates = 0
        #: outcome of :meth:`finish` (None: not run yet)
        self.finished: bool | None = None
        self._pool: ThreadPoolExecutor | None = None
        #: reduce_into's wire buffers (payload, lane sums, counts) by tensor size, the last
        #: WIRE_SIZES sizes (a DDP model's buckets), reused by the next call of that size:
        #: fresh 100 MB buffers per all-reduce cost their page faults and zeroing on every
        #: call (~9% of the CPU of a 16M all-reduce)
        self._wire: dict[tuple[int, int, int], tuple] = {}

    def new_window(self, round_base: int, slots: SlotConfig | None = None) -> None:
        """Start a new session on the same endpoint: a fresh slot window whose rounds start at
        ``round_base`` (every rank the same; :func:`host.transport.session.open_session`
        chooses it), with ``slots`` (default: the current window's timing and policy)."""
        spec = self.spec = dataclasses.replace(self.spec, round_base=round_base & ROUND_MASK)
        self.window = SlotWindow(self.ep, spec.job_id, spec.rank, spec.world, spec.num_slots,
                                 slots or self.window.cfg, round_base=spec.round_base,
                                 token=spec.token)
        self.finished = None

    # -- leaving the job ------------------------------------------------------------------
    def finish(self) -> bool:
        """The closing exchange: one NORM packet that every worker sends after its last
        all-reduce, before it leaves the job (issue 16, H3; docs/transport.md, "Leaving a job").

        It completes only when every worker has sent it, that is when every worker holds every
        result of the job. While it waits, the slot window keeps answering repair needs (its
        stored last-answered packets go out again after two silent retransmissions), so a
        worker still waiting for the job's last round after a switch restart gets that round
        completed by the workers that already had it. Bounded: ``give_up`` seconds without an
        answer (``exact``; the switch restarted while releasing this very packet and the
        others have left, or a worker died after its last all-reduce) or the ``deadline``
        (``partial``) end it without an error — this worker's own results are complete either
        way. Runs once; later calls return the first outcome.

        Returns
        -------
        bool
            True when every worker was in the closing exchange.
        """
        if self.finished is not None:
            return self.finished
        body = np.zeros(NORMS_PER_PACKET, dtype=">f4")
        out = np.zeros(NORMS_PER_PACKET, dtype=np.uint32)
        cnt = np.zeros(1, dtype=np.int32)
        try:
            self.window.exchange_into("norm", MsgType.NORM, NORMS.bits, body.view(np.uint8),
                                      np.array([1]), np.array([0], dtype=np.int64),
                                      MsgType.NORM_RESULT, out, 4, cnt)
            self.finished = int(cnt[0]) == self.spec.world
        except SlotTimeoutError as exc:
            log.warning("job %d rank %d: the closing exchange ended unconfirmed (%s); this "
                        "worker's results are complete", self.spec.job_id, self.spec.rank, exc)
            self.finished = False
        size = THC_HEADER_BYTES + NORMS.nbytes
        self.bytes_sent += size
        self.bytes_received += size
        return self.finished

    def close(self, finish: bool = True) -> None:
        """Leave the job: stop the network thread, :meth:`finish` (unless ``finish=False``:
        after a failure, when this worker's results are not complete anyway), then close the
        endpoint."""
        try:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
            if finish:
                self.finish()
        finally:
            self.ep.close()

    # -- Aggregator interface ------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.spec.rank

    @property
    def world_size(self) -> int:
        return self.spec.world

    def max_floats(self, x: torch.Tensor) -> torch.Tensor:
        """Element-wise maximum over workers of non-negative float32 values (norms)."""
        vals = x.detach().reshape(-1).to(torch.float32).cpu().numpy()
        if vals.size and (not np.all(np.isfinite(vals)) or vals.min() < 0):
            raise ValueError("the switch takes maxima of finite non-negative floats (norms) only")
        n_pk = max(1, -(-vals.size // NORMS_PER_PACKET))
        body = np.zeros(n_pk * NORMS_PER_PACKET, dtype=">f4")
        body[: vals.size] = vals
        nb = NORMS.nbytes
        counts = np.minimum(NORMS_PER_PACKET, vals.size - np.arange(n_pk) * NORMS_PER_PACKET)
        offsets = np.arange(n_pk, dtype=np.int64) * NORMS_PER_PACKET
        out = np.zeros(n_pk * NORMS_PER_PACKET, dtype=np.float32)
        # the maxima's float32 bit patterns, copied as 32-bit lanes
        self.window.exchange_into("norm", MsgType.NORM, NORMS.bits, body.view(np.uint8), counts, offsets,
                                  MsgType.NORM_RESULT, out.view(np.uint32), 4)
        size = THC_HEADER_BYTES + nb
        self.bytes_sent += n_pk * size
        self.bytes_received += n_pk * size
        return torch.from_numpy(out[: vals.size].copy()).reshape(x.shape)

    def sum_floats_async(self, x: torch.Tensor) -> torch.futures.Future:
        raise NotImplementedError(
            "the in-network aggregator sums THC encodings only; run the hook without "
            "uncompressed warm-up iterations (warmup_iters=0)")

    def sum_lanes_async(self, lanes: torch.Tensor, max_value_per_contribution: int) -> torch.futures.Future:
        raise NotImplementedError(
            "the switch adds THC table values looked up from 4-bit indices; use sum_encoded")

    def sum_encoded_async(self, enc: Encoded, codec: THCCodec) -> torch.futures.Future:
        return _done(self.sum_encoded(enc, codec))

    # -- THC over the switch -------------------------------------------------------------
    def sum_encoded(self, enc: Encoded, codec: THCCodec, *,
                    out: np.ndarray | None = None) -> tuple[torch.Tensor, int | torch.Tensor]:
        """Ship ``enc.payload`` (4-bit indices) and return (lane sums, contribution count).

        The count is an int when every packet's sum holds all workers, else a per-coordinate
        int32 tensor (partial policy). The sums are of :attr:`JobSpec.sums_dtype` (as wide as
        the job's lanes). ``out``: a contiguous array of that type and :meth:`sums_size`
        elements that receives them (the returned tensor is a view of it), so that repeated
        calls reuse one buffer instead of faulting in a fresh one; None: a new array.
        """
        self._check_codec(codec)
        P = enc.layout.padded
        C = self.spec.coords_per_packet
        n_pk = -(-P // C)
        raw = enc.payload.numpy()
        if self.spec.uplink == "values":
            nb, up_bits = C * VALUE_BITS // 8, VALUE_BITS
            raw = uplink_values(raw, codec.table)
        else:
            nb, up_bits = C * INDEX_BITS // 8, INDEX_BITS
        if raw.size < n_pk * nb:
            raw = np.concatenate([raw, np.zeros(n_pk * nb - raw.size, dtype=np.uint8)])
        counts = np.minimum(C, P - np.arange(n_pk) * C)
        offsets = np.arange(n_pk, dtype=np.int64) * C
        lb = self.spec.lane_bits
        dt, size = self.spec.sums_dtype, self.sums_size(P)
        if out is None:
            sums = np.empty(size, dtype=dt)
        elif (not isinstance(out, np.ndarray) or out.dtype != dt or out.ndim != 1
              or not out.flags.c_contiguous or out.size != size):
            raise ValueError(f"out: a contiguous 1-D {dt} array of {size} elements "
                             "(sums_size of the layout, JobSpec.sums_dtype)")
        else:
            sums = out
        cnt = np.full(n_pk, self.spec.world, dtype=np.int32)
        self.window.exchange_into("data", MsgType.DATA, up_bits, raw[: n_pk * nb], counts,
                                  offsets, MsgType.RESULT, sums, lb // 8, cnt)
        self.bytes_sent += n_pk * (THC_HEADER_BYTES + nb)
        self.bytes_received += n_pk * (THC_HEADER_BYTES + C * lb // 8)
        self.coordinates += enc.layout.numel
        total = torch.from_numpy(sums[:P])
        if int(cnt.min()) < 1:
            raise RuntimeError("the switch returned a sum without contributions")
        self.last_count = int(cnt.min())
        if bool((cnt == self.spec.world).all()):
            return total, self.spec.world
        return total, torch.from_numpy(_per_coordinate(cnt, C)[:P])

    def sums_size(self, padded: int) -> int:
        """Elements of :meth:`sum_encoded`'s lane sums for a layout of ``padded`` coordinates
        (whole packets of the job's width)."""
        C = self.spec.coords_per_packet
        return -(-padded // C) * C

    def _check_codec(self, codec: THCCodec) -> None:
        """Refuse a codec whose indices or table the job at the switch does not use."""
        if codec.cfg.bits > INDEX_BITS:
            raise ValueError(f"the wire carries {INDEX_BITS}-bit indices; codec has b={codec.cfg.bits}")
        if codec.cfg.granularity != self.spec.granularity:
            raise ValueError(f"codec g={codec.cfg.granularity} but the job was set up for "
                             f"g={self.spec.granularity}")

    def allreduce(self, tensor: torch.Tensor, codec: THCCodec, *,
                  feedback: ErrorFeedback | None = None, stream: int = 0,
                  out: torch.Tensor | None = None) -> torch.Tensor:
        """Average ``tensor`` over the job's workers: THC encode → switch → decode.

        All workers must call this in the same order with tensors of the same shape.
        ``feedback`` applies and updates this worker's error memory (key ``stream``).
        Tensors of at least two parts (``pipeline_coords``) go through the pipelined path
        (:meth:`_allreduce_pipelined`), with the same result. ``out`` (CPU, float32,
        contiguous, as many elements) receives the average and is returned; it may be
        ``tensor`` itself, an in-place all-reduce as ``torch.distributed.all_reduce`` does
        (the pipelined path then allocates nothing of the tensor's size). None: a new tensor.
        """
        if out is not None and (out.device.type != "cpu" or out.dtype != torch.float32
                                or not out.is_contiguous() or out.numel() != tensor.numel()):
            raise ValueError("out: a contiguous CPU float32 tensor with as many elements as "
                             "the tensor")
        t0 = time.perf_counter()
        x = feedback.apply(stream, tensor) if feedback else tensor.reshape(-1).to(torch.float32)
        norms = self.max_floats(codec.chunk_norms(x))
        rnd = self._round
        self._round += 1
        t1 = time.perf_counter()
        parts = self._parts(codec, x.numel()) if x.device.type == "cpu" else [()]
        if len(parts) > 1:
            avg = self._allreduce_pipelined(x, codec, norms, rnd, stream, feedback, parts, out)
            self.last_timing["norms"] = t1 - t0
            self.last_timing["total"] = time.perf_counter() - t0
            if out is not None:
                return out
            return avg.to(tensor.dtype).reshape(tensor.shape)
        enc = codec.encode(x, norms, worker=self.spec.rank, round=rnd, stream=stream,
                           residual=feedback is not None)
        if feedback is not None:
            feedback.store(stream, enc.residual)
        t2 = time.perf_counter()
        sums, count = self.sum_encoded(enc, codec)
        t3 = time.perf_counter()
        avg = codec.decode(sums, count, norms, x.numel(), round=rnd, stream=stream,
                           dtype=tensor.dtype if out is None else torch.float32)
        if out is not None:
            out.view(-1).copy_(avg.reshape(-1))
        t4 = time.perf_counter()
        self.last_timing = {"norms": t1 - t0, "encode": t2 - t1, "network": t3 - t2,
                            "decode": t4 - t3, "total": t4 - t0, "parts": 1}
        return out if out is not None else avg.reshape(tensor.shape)

    def _parts(self, codec: THCCodec, numel: int) -> list[tuple[Segment, ...]]:
        """The pipeline's parts of a tensor (whole packets each), or one part when off."""
        lay = codec.layout(numel)
        if self.pipeline_coords <= 0 or lay.padded < 2 * self.pipeline_coords \
                or codec.cfg.bits > INDEX_BITS:
            return [lay.segments]
        return split_layout(lay, self.pipeline_coords, self.spec.coords_per_packet)

    def _allreduce_pipelined(self, x: torch.Tensor, codec: THCCodec, norms: torch.Tensor,
                             rnd: int, stream: int, feedback: ErrorFeedback | None,
                             parts: list[tuple[Segment, ...]],
                             into: torch.Tensor | None = None) -> torch.Tensor:
        """Encode, exchange and decode ``parts`` overlapped; returns the flat float32 average
        (:meth:`reduce_into` into ``into``, else a fresh tensor)."""
        flat = x.reshape(-1).to(torch.float32).contiguous()
        res = _empty_f32(flat.numel()) if feedback is not None else None
        out = _empty_f32(flat.numel()) if into is None else into.view(-1)
        self.reduce_into(flat, codec, norms, out, round=rnd, stream=stream, residual=res,
                         parts=parts)
        if feedback is not None:
            feedback.store(stream, res)
        return out

    def reduce_into(self, flat: torch.Tensor, codec: THCCodec, norms: torch.Tensor,
                    out: torch.Tensor, *, round: int, stream: int = 0,
                    residual: torch.Tensor | None = None,
                    parts: list[tuple[Segment, ...]] | None = None) -> dict[str, float]:
        """Average ``flat`` over the job's workers into ``out``, codec and network overlapped.

        The calling thread encodes part after part (``parts``, default :meth:`_parts` of the
        tensor) and hands each to a single network thread, which runs the parts' exchanges in
        order (C slot loop, GIL released; results land straight in one lane buffer); finished
        parts are decoded straight into ``out`` as soon as they are back, between encodes. The
        slot rounds are those of one exchange of all packets split in exchanges per part, so
        every worker must use the same parts (same tensor size and ``pipeline_coords``).
        Calls on one aggregator must not overlap: they share its slot window and its wire
        buffers (kept per tensor size between calls).

        Parameters
        ----------
        flat : torch.Tensor
            CPU float32, contiguous, 1-D: this worker's contribution (error memory included).
        norms : torch.Tensor
            The agreed chunk norms (every worker's maximum).
        out : torch.Tensor
            CPU float32, 1-D, ``flat.numel()`` elements: receives the average. It may be
            ``flat`` itself: a part is decoded only after it was encoded, and parts are
            disjoint.
        round, stream : int
            Key the codec's shared signs and this worker's rounding (as :meth:`THCCodec.encode`).
        residual : torch.Tensor, optional
            Like ``flat``: receives this worker's compression error (error feedback).

        Returns
        -------
        dict
            Seconds spent encoding and decoding on the calling thread and in the exchanges on
            the network thread (``encode``, ``decode``, ``network``, ``wait``: the calling
            thread's time blocked on the network), and ``parts``; also :attr:`last_timing`.
        """
        self._check_codec(codec)
        if parts is None:
            parts = self._parts(codec, flat.numel())
        lay = codec.layout(flat.numel())
        P = lay.padded
        C = self.spec.coords_per_packet
        ib = C * INDEX_BITS // 8                  # index bytes per packet
        n_pk = -(-P // C)
        world = self.spec.world
        values = self.spec.uplink == "values"
        nb_pk = C * VALUE_BITS // 8 if values else ib
        up_bits = VALUE_BITS if values else INDEX_BITS
        size = max(packed_size(P, codec.cfg.bits), n_pk * ib)
        key = (size, n_pk, C)
        wire = self._wire.pop(key, None)
        if wire is None:
            # the payload's tail past the packed indices stays zero (index 0 adds 0); every
            # packet's result lanes overwrite its part of ``sums``
            wire = (torch.from_numpy(np.zeros(size, dtype=np.uint8)),
                    np.empty(n_pk * C, dtype=self.spec.sums_dtype),
                    np.empty(n_pk, dtype=np.int32))
            while len(self._wire) >= self.WIRE_SIZES:
                self._wire.pop(next(iter(self._wire)))   # the least recently used size
        self._wire[key] = wire                           # most recently used last
        payload, sums, cnt = wire
        cnt.fill(world)
        raw = payload.numpy()
        sums_t = torch.from_numpy(sums)
        lb = self.spec.lane_bits
        timing = {"encode": 0.0, "network": 0.0, "decode": 0.0, "wait": 0.0}

        def exchange(k0: int, k1: int) -> float:
            t = time.perf_counter()
            body = raw[k0 * ib : k1 * ib]
            if values:
                body = uplink_values(body, codec.table)
            offsets = np.arange(k0, k1, dtype=np.int64) * C
            counts = np.minimum(C, P - offsets)
            self.window.exchange_into("data", MsgType.DATA, up_bits, body, counts, offsets,
                                      MsgType.RESULT, sums[k0 * C : k1 * C], lb // 8, cnt[k0:k1])
            return time.perf_counter() - t

        per_coord: list[torch.Tensor | None] = [None]

        def decode(part: tuple[Segment, ...], k0: int, k1: int) -> None:
            c = cnt[k0:k1]
            if int(c.min()) < 1:
                raise RuntimeError("the switch returned a sum without contributions")
            if bool((c == world).all()):
                count: int | torch.Tensor = world
            else:
                if per_coord[0] is None:
                    per_coord[0] = torch.full((n_pk * C,), world, dtype=torch.int32)
                pc = per_coord[0]
                pc[k0 * C : k1 * C] = torch.from_numpy(_per_coordinate(c, C))
                count = pc
            codec.decode_into(sums_t, count, norms, part, out, round=round, stream=stream)

        pending: list[tuple[tuple[Segment, ...], int, int, Future]] = []

        def finish_head() -> None:
            part, k0, k1, fut = pending.pop(0)
            t = time.perf_counter()
            timing["network"] += fut.result()
            t1 = time.perf_counter()
            timing["wait"] += t1 - t
            decode(part, k0, k1)
            timing["decode"] += time.perf_counter() - t1

        pool = self._net_pool()
        try:
            for part in parts:
                t = time.perf_counter()
                codec.encode_into(flat, norms, part, payload, worker=self.spec.rank, round=round,
                                  stream=stream, residual=residual)
                timing["encode"] += time.perf_counter() - t
                p0 = part[0].offset
                p1 = part[-1].offset + part[-1].padded_total
                k0, k1 = p0 // C, -(-p1 // C)
                pending.append((part, k0, k1, pool.submit(exchange, k0, k1)))
                while pending and pending[0][3].done():
                    finish_head()
            while pending:
                finish_head()
        finally:
            for *_, fut in pending:  # an encode failed: let the submitted exchanges end
                fut.cancel()
                if not fut.cancelled():
                    with contextlib.suppress(Exception):  # the encode's error is the one raised
                        fut.result()
        self.bytes_sent += n_pk * (THC_HEADER_BYTES + nb_pk)
        self.bytes_received += n_pk * (THC_HEADER_BYTES + C * lb // 8)
        self.coordinates += lay.numel
        self.last_count = int(cnt.min())
        timing["parts"] = len(parts)
        self.last_timing = timing
        return timing

    def _net_pool(self) -> ThreadPoolExecutor:
        """The network thread of the pipelined path (one, so exchanges keep their order)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="netco-net")
        return self._pool


@dataclass(frozen=True, kw_only=True)
class _NetworkJob:
    """The job knobs of :class:`NetworkSpec` and :class:`RawNetworkSpec` (keywords only), and
    the aggregator they make of a rank's endpoint."""

    job_id: int = 1
    num_slots: int = 64
    granularity: int = 30
    round_base: int = 1
    policy: str = "exact"
    uplink: str = "indices"
    lane_bits: int = 0
    token: int = 0
    coords_per_packet: int = COORDS_PER_PACKET
    #: the UDP port every rank sends from (the job's ``worker_port``, which the switches'
    #: sender bindings name; issue 33); 0: an ephemeral port (UDP) or THC's port (raw frames)
    worker_port: int = 0

    def _aggregator(self, ep: Endpoint, rank: int, world: int) -> NetworkAggregator:
        spec = JobSpec(self.job_id, rank, world, self.num_slots, self.granularity, self.round_base,
                       self.uplink, self.lane_bits, self.token, self.coords_per_packet)
        return NetworkAggregator(ep, spec, SlotConfig(policy=self.policy))


@dataclass(frozen=True)
class NetworkSpec(_NetworkJob):
    """How every worker of a job reaches its switch over UDP (picklable: goes to workers).

    Parameters
    ----------
    switch : tuple of (host, port)
        The switch's UDP address for each rank (one entry: shared by all ranks).
    ips : tuple of str
        The address each rank binds (its IPv4 address in the controller's file).
    job_id, num_slots, granularity, round_base, uplink, lane_bits, token, coords_per_packet :
        as :class:`JobSpec` (these, ``policy`` and ``worker_port`` by keyword only).
    policy : {"exact", "partial"}
    worker_port : int
        The UDP port each rank binds on its address (the job's ``worker_port``); 0: ephemeral.
    """

    switch: tuple[tuple[str, int], ...]
    ips: tuple[str, ...]

    def connect(self, rank: int, world: int) -> NetworkAggregator:
        """The aggregator of worker ``rank`` (opens its socket)."""
        from host.transport.ports import UdpEndpoint

        if len(self.ips) < world:
            raise ValueError(f"{len(self.ips)} worker addresses for {world} workers")
        sw = self.switch[rank] if len(self.switch) > 1 else self.switch[0]
        ep = UdpEndpoint(sw, bind=(self.ips[rank], self.worker_port))
        return self._aggregator(ep, rank, world)


@dataclass(frozen=True)
class RawNetworkSpec(_NetworkJob):
    """Like :class:`NetworkSpec`, over raw frames on interfaces inside network namespaces.

    Rank ``r`` opens a :class:`~host.transport.ports.RawEndpoint` on ``ifnames[r]`` inside the
    namespace of process ``ns_pids[r]`` (a Mininet host's shell; needs root), so its frames
    leave and enter through that host's interface, while the training process itself (and its
    torch.distributed bookkeeping) stays where it is.

    Parameters
    ----------
    ns_pids, ifnames, macs, ips : per rank
    gateway_macs, gateway_ips : per rank: the attachment switch's MAC and address
    job_id, num_slots, granularity, round_base, policy, lane_bits, token, coords_per_packet,
    worker_port :
        as :class:`NetworkSpec` (``worker_port`` 0: frames leave from THC's UDP port).
    """

    ns_pids: tuple[int, ...]
    ifnames: tuple[str, ...]
    macs: tuple[str, ...]
    ips: tuple[str, ...]
    gateway_macs: tuple[str, ...]
    gateway_ips: tuple[str, ...]

    def connect(self, rank: int, world: int) -> NetworkAggregator:
        """The aggregator of worker ``rank`` (opens its raw socket in the host's namespace)."""
        from host.netns import in_netns
        from host.transport.ports import RawEndpoint

        ep = in_netns(self.ns_pids[rank], lambda: RawEndpoint(
            self.ifnames[rank], self.macs[rank], self.gateway_macs[rank], self.ips[rank],
            self.gateway_ips[rank], sport=self.worker_port or THC_UDP_PORT))
        return self._aggregator(ep, rank, world)
