"""The THC aggregation wire protocol (``docs/protocol.md``): layouts, constants and codecs.

:mod:`host.protocol.layout` owns every header layout; :mod:`host.protocol.codec` packs and
unpacks with it; :mod:`host.protocol.scapy_layers` (imported on demand, it loads scapy)
generates scapy layers from it; ``p4/gen.py`` generates the P4 headers from it.
"""

from host.protocol.codec import (
    Header,
    Message,
    decode,
    encode,
    message_bytes,
    pack_header,
    pack_indices,
    pack_lanes,
    pack_norms,
    unpack_header,
    unpack_indices,
    unpack_lanes,
    unpack_norms,
)
from host.protocol.layout import (
    COORDS_PER_PACKET,
    NORMS_PER_PACKET,
    THC_HEADER,
    THC_HEADER_BYTES,
    THC_UDP_PORT,
    THC_VERSION,
    DropReason,
    Flag,
    MsgType,
    lane_bits_for,
    payload_for,
)

__all__ = [
    "COORDS_PER_PACKET",
    "NORMS_PER_PACKET",
    "THC_HEADER",
    "THC_HEADER_BYTES",
    "THC_UDP_PORT",
    "THC_VERSION",
    "DropReason",
    "Flag",
    "Header",
    "Message",
    "MsgType",
    "decode",
    "encode",
    "lane_bits_for",
    "message_bytes",
    "pack_header",
    "pack_indices",
    "pack_lanes",
    "pack_norms",
    "payload_for",
    "unpack_header",
    "unpack_indices",
    "unpack_lanes",
    "unpack_norms",
]
