"""How a flat tensor is cut into chunks, padded, and split into Hadamard blocks."""

from __future__ import annotations

from dataclasses import dataclass

from host.thc.config import THCConfig


def next_pow2(n: int) -> int:
    """Smallest power of two ``>= n`` (1 for ``n <= 1``)."""
    return 1 << max(0, (n - 1).bit_length())


@dataclass(frozen=True)
class Chunk:
    """One chunk: ``length`` elements from ``start`` of the flat tensor, zero-padded to
    ``padded`` (a multiple of ``block``) at ``offset`` in the padded (wire) layout."""

    index: int
    start: int
    length: int
    offset: int
    padded: int
    block: int


@dataclass(frozen=True)
class Layout:
    """Chunks of a flat tensor of ``numel`` elements; ``padded`` coordinates go on the wire."""

    numel: int
    chunks: tuple[Chunk, ...]

    @property
    def padded(self) -> int:
        return sum(c.padded for c in self.chunks)


def make_layout(numel: int, cfg: THCConfig) -> Layout:
    """Cut ``numel`` elements into chunks of ``cfg.chunk``; pad each to its block size.

    The block is ``cfg.block`` (or the whole chunk when 0), reduced to the next power of two of
    the chunk length for short chunks, so small tensors are not padded to 1024.
    """
    if numel < 1:
        raise ValueError("cannot encode an empty tensor")
    chunks = []
    offset = 0
    for i, start in enumerate(range(0, numel, cfg.chunk)):
        length = min(cfg.chunk, numel - start)
        full = next_pow2(length)
        block = min(cfg.block, full) if cfg.block else full
        padded = -(-length // block) * block
        chunks.append(Chunk(i, start, length, offset, padded, block))
        offset += padded
    return Layout(numel, tuple(chunks))
