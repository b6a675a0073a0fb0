"""Pack and unpack THC messages (UDP payloads) using the layouts of :mod:`host.protocol.layout`.

Nothing here restates a field: the header's ``struct`` format is derived from
:data:`~host.protocol.layout.THC_HEADER`, and payload sizes from the payload descriptors.
Wire rules (``docs/protocol.md``): network byte order; 4-bit THC indices two per byte with the
even element in the high nibble (THC, Li et al. NSDI 2024, step 8); lane sums as unsigned
integers of the lane width; norms as IEEE-754 float32 bit patterns.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from host.protocol import layout as lay

_STRUCT_CODES = {8: "B", 16: "H", 32: "I"}


def _struct_format(hdr: tuple[lay.Field, ...]) -> str:
    try:
        return "!" + "".join(_STRUCT_CODES[f.bits] for f in hdr)
    except KeyError as exc:  # pragma: no cover - guarded by test_layout
        raise ValueError(f"header field of {exc.args[0]} bits has no struct code") from exc


_HEADER = struct.Struct(_struct_format(lay.THC_HEADER))
_FIELD_NAMES = tuple(f.name for f in lay.THC_HEADER)
assert _HEADER.size == lay.THC_HEADER_BYTES
#: The header's ``struct.Struct`` (fields in ``layout.THC_HEADER`` order) for hot paths that
#: pack into preallocated buffers instead of building :class:`Header` objects.
HEADER_STRUCT = _HEADER
#: Field names in ``HEADER_STRUCT`` order.
FIELD_NAMES = _FIELD_NAMES
THC_VERSION = lay.THC_VERSION


@dataclass
class Header:
    """The THC header as Python values; field names are those of ``layout.THC_HEADER``."""

    msg_type: int
    job_id: int
    slot: int
    round: int
    rank: int = 0
    slot_set: int | None = None
    lane_bits: int = lay.INDEX_BITS
    elem_count: int = 0
    chunk_offset: int = 0
    bitmap: int = 0
    count: int = 0
    flags: int = 0
    version: int = lay.THC_VERSION
    reserved0: int = 0
    round_hi: int = 0
    token: int = 0

    def __post_init__(self) -> None:
        if self.slot_set is None:
            self.slot_set = self.round & 1


# The dataclass must name exactly the layout's fields (no second copy that could drift).
assert {f.name for f in fields(Header)} == set(_FIELD_NAMES), "Header out of sync with layout"


def pack_header(h: Header) -> bytes:
    """Serialise ``h`` to :data:`~host.protocol.layout.THC_HEADER_BYTES` bytes."""
    d = asdict(h)
    try:
        return _HEADER.pack(*(d[n] for n in _FIELD_NAMES))
    except struct.error as exc:
        raise ValueError(f"pack_header: a field is out of range ({exc}): {h}") from exc


def unpack_header(buf: bytes) -> Header:
    """Parse the first :data:`~host.protocol.layout.THC_HEADER_BYTES` bytes of ``buf``."""
    if len(buf) < lay.THC_HEADER_BYTES:
        raise ValueError(f"unpack_header: {len(buf)} bytes < {lay.THC_HEADER_BYTES}")
    values = _HEADER.unpack_from(buf)
    return Header(**dict(zip(_FIELD_NAMES, values, strict=True)))


def pack_indices(idx: np.ndarray, count: int = lay.COORDS_PER_PACKET) -> bytes:
    """Pack 4-bit indices two per byte, even element in the high nibble, zero-padded to
    ``count`` elements (THC step 8)."""
    a = np.asarray(idx)
    if a.ndim != 1 or a.size > count:
        raise ValueError(f"pack_indices: need a 1-D array of at most {count} indices")
    if a.size and (a.min() < 0 or a.max() >= lay.TABLE_ENTRIES):
        raise ValueError(f"pack_indices: indices must lie in 0..{lay.TABLE_ENTRIES - 1}")
    full = np.zeros(count + (count & 1), dtype=np.uint8)
    full[: a.size] = a
    return ((full[0::2] << 4) | full[1::2]).astype(np.uint8).tobytes()


def unpack_indices(buf: bytes, count: int = lay.COORDS_PER_PACKET) -> np.ndarray:
    """Inverse of :func:`pack_indices`: ``count`` indices as ``uint8``."""
    b = np.frombuffer(buf, dtype=np.uint8, count=(count + 1) // 2)
    out = np.empty(b.size * 2, dtype=np.uint8)
    out[0::2] = b >> 4
    out[1::2] = b & 0x0F
    return out[:count]


def _lane_dtype(bits: int) -> np.dtype:
    if bits not in lay.LANE_WIDTHS:
        raise ValueError(f"lane width {bits} not in {lay.LANE_WIDTHS}")
    return np.dtype(f">u{bits // 8}")


def pack_lanes(values: np.ndarray, bits: int, count: int = lay.COORDS_PER_PACKET) -> bytes:
    """Unsigned lane sums of width ``bits`` in network byte order, zero-padded to ``count``.

    Raises ``ValueError`` if a value does not fit the lane (THC: never wrap silently).
    """
    a = np.asarray(values, dtype=np.int64)
    dt = _lane_dtype(bits)
    if a.ndim != 1 or a.size > count:
        raise ValueError(f"pack_lanes: need a 1-D array of at most {count} values")
    if a.size and (a.min() < 0 or a.max() > (1 << bits) - 1):
        raise ValueError(f"pack_lanes: values must lie in 0..{(1 << bits) - 1} for {bits}-bit lanes")
    full = np.zeros(count, dtype=dt)
    full[: a.size] = a
    return full.tobytes()


def unpack_lanes(buf: bytes, bits: int, count: int = lay.COORDS_PER_PACKET) -> np.ndarray:
    """Inverse of :func:`pack_lanes`: ``count`` lane values as ``int64``."""
    return np.frombuffer(buf, dtype=_lane_dtype(bits), count=count).astype(np.int64)


def pack_norms(norms: np.ndarray, count: int = lay.NORMS_PER_PACKET) -> bytes:
    """float32 norms (non-negative) as big-endian IEEE-754, zero-padded to ``count``.

    Non-negative float32 values order like their bit patterns read as unsigned integers, which
    is how the switch takes the maximum (THC step 3).
    """
    a = np.asarray(norms, dtype=np.float32)
    if a.ndim != 1 or a.size > count:
        raise ValueError(f"pack_norms: need a 1-D array of at most {count} norms")
    if a.size and not (np.all(np.isfinite(a)) and np.all(a >= 0)):
        raise ValueError("pack_norms: norms must be finite and non-negative")
    full = np.zeros(count, dtype=">f4")
    full[: a.size] = a
    return full.tobytes()


def unpack_norms(buf: bytes, count: int = lay.NORMS_PER_PACKET) -> np.ndarray:
    """Inverse of :func:`pack_norms`: ``count`` norms as ``float32``."""
    return np.frombuffer(buf, dtype=">f4", count=count).astype(np.float32)


@dataclass
class Message:
    """A decoded THC message: header plus payload elements (indices, lanes or norms)."""

    header: Header
    values: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def msg_type(self) -> lay.MsgType:
        """The header's message type as an enum member."""
        return lay.MsgType(self.header.msg_type)


def encode(header: Header, values: np.ndarray, coords: int = lay.COORDS_PER_PACKET) -> bytes:
    """UDP payload (header + fixed-size payload) for ``header`` carrying ``values``.

    ``header.elem_count`` is set to ``len(values)``; the payload layout is chosen by
    :func:`host.protocol.layout.payload_for` at the packet width ``coords``.
    """
    payload = lay.payload_for(header.msg_type, header.lane_bits, coords)
    if payload is None:
        raise ValueError(
            f"encode: msg_type={header.msg_type} with lane_bits={header.lane_bits} is not a "
            "defined combination (see docs/protocol.md)"
        )
    values = np.asarray(values)
    header.elem_count = int(values.size)
    if payload.name == lay.INDICES.name:
        body = pack_indices(values, coords)
    elif payload is lay.NORMS:
        body = pack_norms(values)
    else:
        body = pack_lanes(values, header.lane_bits, payload.count)
    return pack_header(header) + body


def decode(buf: bytes, coords: int = lay.COORDS_PER_PACKET) -> Message:
    """Parse a UDP payload produced by :func:`encode` (or by the switch) at packet width
    ``coords``.

    Raises ``ValueError`` on a short buffer or an undefined type/lane combination.
    """
    h = unpack_header(buf)
    payload = lay.payload_for(h.msg_type, h.lane_bits, coords)
    if payload is None:
        raise ValueError(f"decode: msg_type={h.msg_type} lane_bits={h.lane_bits} undefined")
    body = buf[lay.THC_HEADER_BYTES :]
    if len(body) < payload.nbytes:
        raise ValueError(f"decode: payload {len(body)} bytes < {payload.nbytes}")
    indices = payload.name == lay.INDICES.name
    n = min(h.elem_count, coords if indices else payload.count)
    if indices:
        vals = unpack_indices(body, coords)[:n]
    elif payload is lay.NORMS:
        vals = unpack_norms(body)[:n]
    else:
        vals = unpack_lanes(body, h.lane_bits, payload.count)[:n]
    return Message(h, vals)


def message_bytes(msg_type: int, lane_bits: int, coords: int = lay.COORDS_PER_PACKET) -> int:
    """UDP payload length of a message (header + fixed payload) at packet width ``coords``."""
    payload = lay.payload_for(msg_type, lane_bits, coords)
    return lay.THC_HEADER_BYTES + (payload.nbytes if payload else 0)


def norm_status_request(job_id: int, rank: int, token: int, slot: int = 0, round: int = 1) -> bytes:
    """A status request (``PEEK``) for norm ``slot`` of ``job_id`` as ``rank``, with ``token``:
    a NORM message flagged PEEK whose norms are zero (docs/protocol.md, step 0). The switch
    answers it with the copy's count and bitmap, or stays silent on a wrong token."""
    h = Header(msg_type=lay.MsgType.NORM, job_id=job_id, slot=slot, round=round & 0xFFFFFFFF,
               slot_set=round & 1, lane_bits=lay.NORMS.bits, rank=rank, token=token,
               flags=int(lay.Flag.PEEK), elem_count=lay.NORMS_PER_PACKET)
    return pack_header(h) + bytes(lay.NORMS.nbytes)
