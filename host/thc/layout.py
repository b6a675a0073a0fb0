"""How a flat tensor is cut into chunks, padded, and split into Hadamard blocks.

All chunks but the last have ``cfg.chunk`` elements and need no padding (``chunk`` is a multiple
of the block), so a layout is at most two *segments* of identical chunks: the full chunks, then
the last one. The kernels work segment by segment, with one scale per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

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
class Segment:
    """``count`` consecutive chunks of identical geometry, the first being chunk ``first``."""

    first: int
    count: int
    start: int
    offset: int
    length: int
    padded: int
    block: int

    @property
    def numel(self) -> int:
        """Real elements in the segment."""
        return self.count * self.length

    @property
    def padded_total(self) -> int:
        """Padded coordinates in the segment."""
        return self.count * self.padded


@dataclass(frozen=True)
class Layout:
    """Chunks of a flat tensor of ``numel`` elements; ``padded`` coordinates go on the wire."""

    numel: int
    segments: tuple[Segment, ...]

    @property
    def padded(self) -> int:
        return sum(s.padded_total for s in self.segments)

    @property
    def n_chunks(self) -> int:
        return sum(s.count for s in self.segments)

    @cached_property
    def chunks(self) -> tuple[Chunk, ...]:
        """Every chunk (built on first use)."""
        return tuple(
            Chunk(s.first + k, s.start + k * s.length, s.length, s.offset + k * s.padded,
                  s.padded, s.block)
            for s in self.segments
            for k in range(s.count)
        )


def make_layout(numel: int, cfg: THCConfig) -> Layout:
    """Cut ``numel`` elements into chunks of ``cfg.chunk``; pad each to its block size.

    The block is ``cfg.block`` (or the whole chunk when 0), reduced to the next power of two of
    the chunk length for short chunks, so small tensors are not padded to 1024.
    """
    if numel < 1:
        raise ValueError("cannot encode an empty tensor")

    def geometry(length: int) -> tuple[int, int]:
        full = next_pow2(length)
        block = min(cfg.block, full) if cfg.block else full
        return -(-length // block) * block, block

    segs = []
    n_full, rest = divmod(numel, cfg.chunk)
    if n_full:
        padded, block = geometry(cfg.chunk)
        segs.append(Segment(0, n_full, 0, 0, cfg.chunk, padded, block))
    if rest:
        padded, block = geometry(rest)
        start = n_full * cfg.chunk
        offset = segs[0].padded_total if segs else 0
        segs.append(Segment(n_full, 1, start, offset, rest, padded, block))
    return Layout(numel, tuple(segs))


def split_layout(lay: Layout, part_coords: int, align: int = 1) -> list[tuple[Segment, ...]]:
    """Cut a layout into parts of about ``part_coords`` padded coordinates, at chunk bounds.

    Every part starts at a padded offset that is a multiple of ``align`` (the coordinates of
    one network packet, so that a part is a whole number of packets); a segment whose chunks
    are not multiples of ``align`` is not cut and joins the part before it (only the short
    last chunk of a tensor can be such). Parts in order cover every chunk once; each part is
    a tuple of (sub-)segments for :meth:`THCCodec.encode_into`/``decode_into``.
    """
    parts: list[list[Segment]] = []
    for seg in lay.segments:
        if seg.padded % align or seg.offset % align:
            if parts:
                parts[-1].append(seg)
            else:
                parts.append([seg])
            continue
        k = max(1, part_coords // seg.padded)
        for i in range(0, seg.count, k):
            c = min(k, seg.count - i)
            parts.append([Segment(seg.first + i, c, seg.start + i * seg.length,
                                  seg.offset + i * seg.padded, seg.length, seg.padded, seg.block)])
    return [tuple(p) for p in parts]
