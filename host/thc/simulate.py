"""Run the THC protocol as the workers and the aggregator would, in one process.

Norm agreement (maximum of the workers' chunk norms), encode with per-worker randomness,
integer aggregation into lanes, decode with the contribution count (THC reference, steps 2-11).
Used by ``netco thc roundtrip``, the benchmark and the tests; the network transports do the same
steps across machines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from host.thc.codec import Encoded, THCCodec
from host.thc.feedback import ErrorFeedback
from host.thc.lanes import aggregate_packed, lane_bits


@dataclass
class RoundResult:
    """Outcome of one simulated all-reduce."""

    average: torch.Tensor
    sums: np.ndarray
    norms: torch.Tensor
    lane_bits: int
    count: int
    bytes_up: int
    bytes_down: int


def encode_workers(codec: THCCodec, xs: list[torch.Tensor], round: int = 0) -> list[Encoded]:
    """Each worker's encoding of its tensor in ``round`` (worker ``r`` holds ``xs[r]``), with the
    norms the workers agree on: the maxima of their chunk norms."""
    norms = torch.stack([codec.chunk_norms(x) for x in xs]).amax(dim=0)
    return [codec.encode(x, norms, worker=r, round=round) for r, x in enumerate(xs)]


def table_values(codec: THCCodec, encs: list[Encoded]) -> list[np.ndarray]:
    """Per encoding, the table value of each of its indices (int64): what a switch adds up."""
    table = torch.tensor(codec.table)
    return [table[codec.indices(e).long()].numpy().astype(np.int64) for e in encs]


def allreduce(
    codec: THCCodec,
    tensors: list[torch.Tensor],
    *,
    round: int = 0,
    stream: int = 0,
    feedback: list[ErrorFeedback] | None = None,
    contributors: list[int] | None = None,
) -> RoundResult:
    """Average ``tensors`` (one per worker) through THC.

    Parameters
    ----------
    codec : THCCodec
    tensors : list of torch.Tensor
        Same shape; worker ``i`` holds ``tensors[i]``.
    round, stream : int
        Key the shared signs and the rounding randomness.
    feedback : list of ErrorFeedback, optional
        One per worker; applied before encoding and updated after.
    contributors : list of int, optional
        Workers whose contributions reach the sum (default all): a partial sum of ``m`` of
        them decodes to their average.
    """
    if not tensors:
        raise ValueError("need at least one worker tensor")
    shape = tensors[0].shape
    for i, t in enumerate(tensors):
        if t.shape != shape:
            raise ValueError(f"worker {i} has shape {tuple(t.shape)}, worker 0 has {tuple(shape)}")
    numel = tensors[0].numel()
    xs = [
        feedback[i].apply(stream, t) if feedback else t.reshape(-1).to(torch.float32)
        for i, t in enumerate(tensors)
    ]
    norms = torch.stack([codec.chunk_norms(x) for x in xs]).amax(dim=0)
    want_res = feedback is not None
    encs = [
        codec.encode(x, norms, worker=i, round=round, stream=stream, residual=want_res)
        for i, x in enumerate(xs)
    ]
    if feedback:
        for i, e in enumerate(encs):
            feedback[i].store(stream, e.residual)
    who = list(range(len(tensors))) if contributors is None else contributors
    lanes = lane_bits(len(tensors), codec.cfg.granularity)
    padded = encs[0].layout.padded
    sums = aggregate_packed(
        [encs[i].payload for i in who], codec.table, codec.cfg.granularity, codec.cfg.bits,
        padded, lanes,
    )
    avg = codec.decode(sums, len(who), norms, numel, round=round, stream=stream,
                       dtype=tensors[0].dtype).reshape(shape)
    n_chunks = encs[0].layout.n_chunks
    return RoundResult(
        average=avg,
        sums=sums,
        norms=norms,
        lane_bits=lanes,
        count=len(who),
        bytes_up=int(encs[0].payload.numel()) + 4 * n_chunks,
        bytes_down=padded * lanes // 8 + 4 * n_chunks,
    )
