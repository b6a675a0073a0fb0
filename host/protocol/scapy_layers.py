"""scapy layers generated from :mod:`host.protocol.layout` (tests and packet crafting only).

Importing this module defines ``THC`` (the header), one payload layer per payload layout
(``ThcIndices``, ``ThcLanes8``, ``ThcLanes16``, ``ThcLanes32``, ``ThcNorms``) and binds ``THC``
to UDP port :data:`~host.protocol.layout.THC_UDP_PORT`. No field is written here by hand.
"""

from __future__ import annotations

from typing import Any

from scapy.fields import BitField, ByteEnumField, ByteField, Field, IntField, ShortField
from scapy.layers.inet import UDP
from scapy.packet import Packet, Raw, bind_layers

from host.protocol import layout as lay


def _scapy_field(f: lay.Field, enum: dict[int, str] | None = None) -> Field:
    if enum is not None and f.bits == 8:
        return ByteEnumField(f.name, 0, enum)
    if f.bits == 8:
        return ByteField(f.name, 0)
    if f.bits == 16:
        return ShortField(f.name, 0)
    if f.bits == 32:
        return IntField(f.name, 0)
    return BitField(f.name, 0, f.bits)


def _header_layer() -> type[Packet]:
    enums = {"msg_type": {m.value: m.name for m in lay.MsgType}}
    defaults = {"version": lay.THC_VERSION}
    desc = []
    for f in lay.THC_HEADER:
        fld = _scapy_field(f, enums.get(f.name))
        fld.default = defaults.get(f.name, 0)
        desc.append(fld)

    def guess_payload_class(self: Packet, payload: bytes) -> type[Packet]:
        p = lay.payload_for(self.msg_type, self.lane_bits)
        return PAYLOAD_LAYERS.get(p.name, Raw) if p is not None else Raw

    return type("THC", (Packet,), {
        "name": "THC aggregation header",
        "fields_desc": desc,
        "guess_payload_class": guess_payload_class,
    })


def _payload_layer(p: lay.Payload, cls_name: str) -> type[Packet]:
    desc = [_scapy_field(f) for f in p.fields]

    def values(self: Packet) -> list[int]:
        return [getattr(self, f.name) for f in p.fields]

    def extract_padding(self: Packet, s: bytes) -> tuple[bytes, bytes]:
        return b"", s

    attrs: dict[str, Any] = {
        "name": f"THC {p.name}",
        "fields_desc": desc,
        "values": values,
        "extract_padding": extract_padding,
    }
    return type(cls_name, (Packet,), attrs)


THC = _header_layer()
ThcIndices = _payload_layer(lay.INDICES, "ThcIndices")
ThcLanes8 = _payload_layer(lay.LANES[8], "ThcLanes8")
ThcLanes16 = _payload_layer(lay.LANES[16], "ThcLanes16")
ThcLanes32 = _payload_layer(lay.LANES[32], "ThcLanes32")
ThcNorms = _payload_layer(lay.NORMS, "ThcNorms")

#: payload layout name -> scapy layer
PAYLOAD_LAYERS: dict[str, type[Packet]] = {
    lay.INDICES.name: ThcIndices,
    lay.LANES[8].name: ThcLanes8,
    lay.LANES[16].name: ThcLanes16,
    lay.LANES[32].name: ThcLanes32,
    lay.NORMS.name: ThcNorms,
}

bind_layers(UDP, THC, dport=lay.THC_UDP_PORT)
bind_layers(UDP, THC, sport=lay.THC_UDP_PORT)
