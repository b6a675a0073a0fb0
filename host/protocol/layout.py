"""The netco THC aggregation protocol: every header layout and constant, written once.

This module is the single source of truth for the wire format described in
``docs/protocol.md``. Three consumers derive from it and never restate it:

* the host library packs and unpacks messages with :mod:`host.protocol.codec`;
* scapy layers are generated from it in :mod:`host.protocol.scapy_layers`;
* the P4 program's header types and constants are generated from it by ``p4/gen.py``
  (``p4/shared/generated_protocol.p4``, included by the v1model and TNA programs).

Design follows the published in-network aggregation systems — SwitchML's two copies per slot
(Sapio et al., "Scaling Distributed Machine Learning with In-Network Aggregation", NSDI 2021) and
ATP's 32-bit contributor bitmap (Lao et al., "ATP: In-network Aggregation for Multi-tenant
Learning", NSDI 2021) — carrying THC integers: packed table indices up, integer sums down
(Li et al., NSDI 2024).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

#: UDP destination (and source) port of every THC message: 0x5448, ASCII "TH".
THC_UDP_PORT = 0x5448

#: Protocol version carried in every header; the switch drops any other value. Version 2 added
#: the per-job ``token`` (header 28 -> 32 bytes), :attr:`Flag.START` and
#: :attr:`DropReason.AHEAD` (docs/protocol.md, "Version 2").
THC_VERSION = 2

#: A contribution whose round is more than this many rounds ahead of its slot copy's (serial
#: arithmetic) is dropped as :attr:`DropReason.AHEAD` unless it carries :attr:`Flag.START`. A
#: copy sees every round of its parity, so an honest sender is at most 2 ahead; 2^16 leaves
#: room and is a 16-bit test on Tofino (the high half of the difference is zero). A blind
#: spoofer's random round lands inside with probability 2^-16 (and it needs the token too).
ROUND_WINDOW = 1 << 16

#: Rate limit of frames that fail validation (docs/security.md, "Data plane"; issue 33, 4): a
#: source (IPv4 address and UDP port) that sends more than ``RATE_LIMIT_FRAMES`` of them within
#: ``RATE_LIMIT_WINDOW_US`` is held for ``RATE_LIMIT_HOLD_US``: every frame of it, its right
#: guesses of a token included, is dropped as :attr:`DropReason.RATE_LIMITED` before
#: validation. A member's own socket never sends such frames. Sources share
#: ``RATE_LIMIT_SOURCES`` hash slots; a slot names its source, so a source whose slot another
#: one holds is never held in its place. The software target's C loop (``netco switch
#: --invalid-limit``) and the v1model program (``p4/v1model/include/control/rate_limit.p4``)
#: both apply it.
RATE_LIMIT_FRAMES = 1000
RATE_LIMIT_WINDOW_US = 1_000_000
RATE_LIMIT_HOLD_US = 2_000_000
RATE_LIMIT_SOURCES = 4096

#: Rounds are serial numbers of this many bits (RFC 1982 arithmetic modulo 2^48): the header's
#: ``round`` carries the low 32 bits and ``round_hi`` the high 16. A round base drawn from a
#: microsecond clock is then unique for 2^47 us (4.46 years), not 2^31 us (35.8 min), so a
#: packet of an earlier session is always older than the copies of a later one
#: (docs/protocol.md, "Sessions"; issue 33). Senders that leave ``round_hi`` 0 see 32-bit rounds.
ROUND_BITS = 48
#: Mask of a round (``ROUND_BITS`` ones).
ROUND_MASK = (1 << ROUND_BITS) - 1
#: A round ``d`` (``(r - held) & ROUND_MASK``) ahead of the held one is older when ``d`` has
#: this bit set.
ROUND_OLDER = 1 << (ROUND_BITS - 1)


def round_fields(r: int) -> tuple[int, int]:
    """The header's (``round``, ``round_hi``) of the 48-bit round ``r``."""
    return r & 0xFFFFFFFF, (r >> 32) & 0xFFFF


#: Coordinates per data packet (fixed payload, zero-padded; see docs/protocol.md for the choice).
COORDS_PER_PACKET = 256

#: Coordinates per DATA, RESULT and PARTIAL packet a target may be set up for (its *packet
#: width*, docs/protocol.md, "Packet width"). Every target takes :data:`COORDS_PER_PACKET`, the
#: only width of the P4 programs (BMv2 and Tofino drop a wider packet as MALFORMED: its
#: ``elem_count`` exceeds 256); the software target takes the others with
#: ``--coords-per-packet``, as long as no payload exceeds :data:`MAX_PAYLOAD_BYTES`.
PACKET_WIDTHS = (COORDS_PER_PACKET, 2 * COORDS_PER_PACKET, 4 * COORDS_PER_PACKET)

#: float32 norms per norm packet (one per chunk that the packet's slot covers).
NORMS_PER_PACKET = 32

#: Bits per coordinate going up (THC b = 4: two indices per byte, even element high).
INDEX_BITS = 4

#: Bits per coordinate of the *values uplink*: DATA with ``lane_bits == VALUE_BITS`` carries the
#: THC table values L[q] (0..g) in 8-bit lanes instead of 4-bit indices, so the switch adds
#: without a per-lane lookup (what Tofino needs; docs/protocol.md, "Values uplink").
VALUE_BITS = 8

#: Lane widths a result may use (bits per summed coordinate going down).
LANE_WIDTHS = (8, 16, 32)

#: The largest payload of any message at any packet width: 256 32-bit lanes (1024 B), so a
#: frame stays within 1098 B and a 1500-byte MTU. A job whose lanes at the switch's packet width
#: would need more is refused (:func:`host.protocol.jobs.width_problem`).
MAX_PAYLOAD_BYTES = COORDS_PER_PACKET * max(LANE_WIDTHS) // 8

#: Contributor bitmaps are 32 bits wide, so at most 32 contributors per switch and job.
MAX_WORKERS = 32

#: Entries in a THC table (2^b for b = 4).
TABLE_ENTRIES = 1 << INDEX_BITS


class MsgType(enum.IntEnum):
    """Message types (``msg_type`` header field)."""

    #: worker -> switch: packed 4-bit THC indices of one slot/round.
    DATA = 1
    #: switch -> workers (or parent -> child switch): lane sums, count and bitmap.
    RESULT = 2
    #: worker -> switch: float32 norms, the switch keeps the maximum.
    NORM = 3
    #: switch -> workers: the maximum norms, count and bitmap.
    NORM_RESULT = 4
    #: child switch -> parent switch: a partial aggregate (lane sums) as one contributor.
    PARTIAL = 5
    #: child switch -> parent switch: a partial norm maximum as one contributor.
    NORM_PARTIAL = 6


#: Message types travelling towards the root (contributions).
UP_TYPES = frozenset({MsgType.DATA, MsgType.NORM, MsgType.PARTIAL, MsgType.NORM_PARTIAL})
#: Message types travelling away from the root (results).
DOWN_TYPES = frozenset({MsgType.RESULT, MsgType.NORM_RESULT})
#: Message types whose payload holds float32 norms.
NORM_TYPES = frozenset({MsgType.NORM, MsgType.NORM_RESULT, MsgType.NORM_PARTIAL})


class Flag(enum.IntFlag):
    """Bits of the ``flags`` header field."""

    #: set by a sender on a retransmitted contribution (informational; the bitmap dedups).
    RETX = 0x01
    #: set by the switch on a stored result sent again to answer a retransmission.
    RESENT = 0x02
    #: worker (partial policy): the slot's deadline passed; release the current sum as the
    #: result with its count m and bitmap (THC decodes S/m without bias).
    DEADLINE = 0x04
    #: worker: answer this sender only with the copy's current count and bitmap (a RESULT
    #: flagged PEEK, sums not meaningful); changes no state. Used to name missing ranks.
    PEEK = 0x08
    #: worker: a round of this slot copy's first use in a session (``round_base`` and
    #: ``round_base + 1``): the switch accepts it however far ahead of the copy's round (a new
    #: session starts at the clock, far above the last one); any other contribution more than
    #: :data:`ROUND_WINDOW` ahead is dropped as :attr:`DropReason.AHEAD` (issue 16, H2).
    START = 0x10


class DropReason(enum.IntEnum):
    """Index of the switch's drop counter (``ingress.drops``) for each reason a packet dies.

    A contribution that is absorbed into a slot without completing it is not a drop; it is
    counted by the contribution counter instead.
    """

    NONE = 0
    #: truncated THC packet (parser ran out of bytes) or THC header without its payload.
    SHORT = 1
    #: ``version`` is not :data:`THC_VERSION`.
    BAD_VERSION = 2
    #: unknown ``msg_type``.
    BAD_TYPE = 3
    #: field out of range: set bit, set != round parity, element count, rank, lane width.
    MALFORMED = 4
    #: no controller entry for ``job_id``.
    UNKNOWN_JOB = 5
    #: (job, rank) not bound to this ingress port and source address, or a result not from
    #: the job's parent, or a worker sending a child-switch message type.
    BAD_SENDER = 6
    #: slot index outside the job's slot range.
    BAD_SLOT = 7
    #: round older than the one the slot copy holds (a late packet of a finished round).
    STALE = 8
    #: contributor already counted in an incomplete slot (the retransmission waits).
    DUPLICATE = 9
    #: ordinary IPv4 packet without a route.
    NO_ROUTE = 10
    #: not IPv4 (or an IPv4 packet the parser could not read).
    NOT_IPV4 = 11
    #: IPv4 TTL expired.
    TTL_EXPIRED = 12
    #: the job's lane width is one this target cannot produce from DATA (v1model on BMv2:
    #: 32-bit lanes would grow the packet by more than BMv2's 512 bytes of headroom).
    LANE_UNSUPPORTED = 13
    #: round more than :data:`ROUND_WINDOW` ahead of the slot copy's without
    #: :attr:`Flag.START` (far-future rounds would make every later contribution STALE).
    AHEAD = 14
    #: the source (IPv4 address and UDP port) sent more than :data:`RATE_LIMIT_FRAMES` frames
    #: that failed validation within :data:`RATE_LIMIT_WINDOW_US` and is held for
    #: :data:`RATE_LIMIT_HOLD_US`: dropped before validation (issue 33, 4).
    RATE_LIMITED = 15


#: Size of the drop counter array (room for future reasons).
DROP_REASONS = 16


@dataclass(frozen=True)
class Field:
    """One header field: its name (also the P4 and scapy name), width in bits and meaning."""

    name: str
    bits: int
    doc: str


#: The THC header that follows the UDP header, in wire order (network byte order).
THC_HEADER: tuple[Field, ...] = (
    Field("version", 8, "protocol version, THC_VERSION"),
    Field("msg_type", 8, "MsgType"),
    Field("flags", 8, "Flag bits (RETX, RESENT)"),
    Field("lane_bits", 8, "bits per payload element: 4 (DATA), 8/16/32 (lanes), 32 (norms)"),
    Field("job_id", 16, "job the message belongs to (controller-assigned)"),
    Field("rank", 8, "contributor id at this switch: worker rank, or child-switch id; "
                     "255 on multicast results"),
    Field("slot_set", 8, "which of the slot's two copies: round parity (0 or 1)"),
    Field("slot", 16, "slot index within the job's slot range"),
    Field("elem_count", 16, "meaningful elements in the payload (rest is zero padding)"),
    Field("round", 32, "round of this slot (per-slot sequence number): its low 32 bits"),
    Field("chunk_offset", 32, "index of the payload's first element in the sender's tensor"),
    Field("bitmap", 32, "bit r set = worker rank r is in the sum (results, partials)"),
    Field("count", 8, "number of worker contributions in the sum (results, partials)"),
    Field("reserved0", 8, "zero"),
    Field("round_hi", 16, "the round's high 16 bits: rounds are 48-bit serial numbers, so "
                          "a session's round base is unique for 2^47 us (docs/protocol.md)"),
    Field("token", 32, "per-job secret the controller installs (set_job.token); the switch "
                       "drops a contribution or result with another as BAD_SENDER, workers "
                       "ignore results with another"),
)

#: Rank value the switch writes into multicast results.
RANK_ALL = 255


def header_bytes(fields: tuple[Field, ...] = THC_HEADER) -> int:
    """Length in bytes of a header made of ``fields`` (must be whole bytes)."""
    bits = sum(f.bits for f in fields)
    if bits % 8:
        raise ValueError(f"header of {bits} bits is not whole bytes")
    return bits // 8


THC_HEADER_BYTES = header_bytes()


def field_offsets(fields: tuple[Field, ...] = THC_HEADER) -> dict[str, tuple[int, int]]:
    """name -> (byte offset, bits) of every field of a header made of ``fields`` in wire order.

    Raises
    ------
    ValueError
        If two fields share a name or a field is not whole bytes.
    """
    out, off = {}, 0
    for f in fields:
        if f.name in out:
            raise ValueError(f"header field name {f.name!r} used twice")
        if f.bits % 8:
            raise ValueError(f"header field {f.name!r} of {f.bits} bits is not whole bytes")
        out[f.name] = (off, f.bits)
        off += f.bits // 8
    return out


#: name -> (byte offset in the THC header, bits) of every THC header field.
THC_FIELDS: dict[str, tuple[int, int]] = field_offsets()


@dataclass(frozen=True)
class Payload:
    """A fixed-size payload header: ``count`` elements of ``bits`` bits named ``prefix<i>``."""

    name: str
    prefix: str
    bits: int
    count: int

    @property
    def nbytes(self) -> int:
        """Length in bytes."""
        return self.bits * self.count // 8

    @property
    def fields(self) -> tuple[Field, ...]:
        """The payload as a tuple of fields (P4 and scapy use one field per element)."""
        return tuple(Field(f"{self.prefix}{i}", self.bits, "") for i in range(self.count))


#: 4-bit indices going up, packed two per byte (even element in the high nibble).
INDICES = Payload("indices", "p", 8, COORDS_PER_PACKET // 2)
#: Lane sums going down (and partial aggregates going up a tree), one payload per lane width.
LANES: dict[int, Payload] = {w: Payload(f"lanes{w}", "l", w, COORDS_PER_PACKET) for w in LANE_WIDTHS}
#: float32 norms as IEEE-754 bit patterns.
NORMS = Payload("norms", "n", 32, NORMS_PER_PACKET)


def payload_for(msg_type: int, lane_bits: int,
                coords: int = COORDS_PER_PACKET) -> Payload | None:
    """Payload layout that follows a header with ``msg_type`` and ``lane_bits``.

    ``coords`` is the packet width (:data:`PACKET_WIDTHS`): DATA, RESULT and PARTIAL carry that
    many elements; norm messages always carry :data:`NORMS_PER_PACKET`. Returns ``None`` for a
    combination the protocol does not define (the switch drops such packets as malformed),
    including a payload over :data:`MAX_PAYLOAD_BYTES`.
    """
    if msg_type == MsgType.DATA:
        if lane_bits == INDEX_BITS:
            p = INDICES
        elif lane_bits == VALUE_BITS:
            p = LANES[VALUE_BITS]
        else:
            return None
    elif msg_type in NORM_TYPES:
        return NORMS if lane_bits == 32 else None
    elif msg_type in (MsgType.RESULT, MsgType.PARTIAL):
        p = LANES.get(lane_bits)
        if p is None:
            return None
    else:
        return None
    if coords == COORDS_PER_PACKET:
        return p
    wide = Payload(p.name, p.prefix, p.bits, p.count * coords // COORDS_PER_PACKET)
    return wide if wide.nbytes <= MAX_PAYLOAD_BYTES else None


def lane_bits_for(n: int, g: int) -> int:
    """Narrowest lane width that holds a sum of ``n`` contributions of values in ``0..g``.

    THC step 10 (Li et al., NSDI 2024): a lane must hold n·g without wrapping.

    Raises
    ------
    ValueError
        If ``n`` or ``g`` is not positive or n·g does not fit 32 bits.
    """
    if n < 1 or g < 1:
        raise ValueError(f"lane_bits_for: n={n} and g={g} must be positive")
    for w in LANE_WIDTHS:
        if n * g <= (1 << w) - 1:
            return w
    raise ValueError(f"lane_bits_for: n*g = {n * g} does not fit a 32-bit lane")
