"""Ethernet/IPv4/UDP framing around THC messages: every outer-header offset, length and
constant, and the helpers that build and read frames, written once.

``docs/protocol.md``, "Encapsulation": Ethernet II, IPv4 without options, UDP to and from
:data:`~host.protocol.layout.THC_UDP_PORT` with checksum 0 (allowed for IPv4), then the THC
header of :mod:`host.protocol.layout`. The transport's raw endpoint, the software target
(numpy and C) and the test tools build and read frames through this module; ``p4/gen.py``
writes its offsets and constants into the C header ``host/protocol/netco_layout.h`` that the
C extensions include.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable

from host.protocol import layout as lay
from host.protocol.layout import Field

#: Ethernet type of IPv4.
ETHERTYPE_IPV4 = 0x0800
#: IPv4 protocol number of UDP.
IP_PROTO_UDP = 17
#: IPv4 version 4, header length 5 words (no options): the only IPv4 header netco sends.
IPV4_VER_IHL = 0x45
#: IPv4 "don't fragment" flag (in the 16-bit flags/fragment-offset field).
IPV4_DONT_FRAGMENT = 0x4000
#: TTL of the frames the hosts send (the switch writes ``RESULT_TTL`` of define.p4 on results).
DEFAULT_TTL = 64
#: Largest THC datagram (UDP payload: header + 256 32-bit lanes) with room to spare.
MAX_DATAGRAM = 2048
#: Bytes per frame buffer row of the software target (a 1500-byte MTU frame plus room).
ROW_BYTES = 2048

#: Ethernet II header, wire order.
ETHERNET: tuple[Field, ...] = (
    Field("dst_mac", 48, "destination MAC"),
    Field("src_mac", 48, "source MAC"),
    Field("ethertype", 16, "ETHERTYPE_IPV4"),
)
#: IPv4 header without options, wire order.
IPV4: tuple[Field, ...] = (
    Field("verihl", 8, "version and header length, IPV4_VER_IHL"),
    Field("tos", 8, "type of service"),
    Field("ip_len", 16, "total length"),
    Field("ident", 16, "identification"),
    Field("frag", 16, "flags and fragment offset"),
    Field("ttl", 8, "time to live"),
    Field("proto", 8, "IP_PROTO_UDP"),
    Field("ip_csum", 16, "header checksum (RFC 791)"),
    Field("src", 32, "source address"),
    Field("dst", 32, "destination address"),
)
#: UDP header, wire order.
UDP: tuple[Field, ...] = (
    Field("sport", 16, "source port"),
    Field("dport", 16, "destination port"),
    Field("udp_len", 16, "UDP header + payload length"),
    Field("udp_csum", 16, "checksum, 0 (none)"),
)

ETH_HEADER_BYTES = lay.header_bytes(ETHERNET)
IPV4_HEADER_BYTES = lay.header_bytes(IPV4)
UDP_HEADER_BYTES = lay.header_bytes(UDP)
#: Offset of the IPv4 header, the UDP header, the THC header and the THC payload in a frame.
IPV4_OFFSET = ETH_HEADER_BYTES
UDP_OFFSET = IPV4_OFFSET + IPV4_HEADER_BYTES
THC_OFFSET = UDP_OFFSET + UDP_HEADER_BYTES
PAYLOAD_OFFSET = THC_OFFSET + lay.THC_HEADER_BYTES


#: name -> (byte offset in the frame, bits) of every Ethernet, IPv4, UDP and THC header field.
FIELDS: dict[str, tuple[int, int]] = lay.field_offsets((*ETHERNET, *IPV4, *UDP, *lay.THC_HEADER))


def offset(name: str) -> int:
    """Byte offset of header field ``name`` in a frame."""
    return FIELDS[name][0]


_CODES = {8: "B", 16: "H", 32: "4s", 48: "6s"}


def header_struct(fields: tuple[Field, ...]) -> struct.Struct:
    """A big-endian :class:`struct.Struct` packing one header's ``fields`` in wire order
    (addresses as byte strings)."""
    return struct.Struct("!" + "".join(_CODES[f.bits] for f in fields))


def frame_struct(names: Iterable[str]) -> struct.Struct:
    """A big-endian :class:`struct.Struct` reading the fields ``names`` (in frame order, no
    overlaps) from the start of a frame; MAC fields read as 6-byte strings, addresses as
    4-byte strings."""
    fmt, pos = "!", 0
    for n in sorted(names, key=offset):
        off, bits = FIELDS[n]
        if off < pos:
            raise ValueError(f"frame_struct: field {n!r} overlaps the one before it")
        if off > pos:
            fmt += f"{off - pos}x"
        fmt += _CODES[bits]
        pos = off + bits // 8
    return struct.Struct(fmt)


def mac_bytes(mac: str) -> bytes:
    """``"02:00:00:00:00:01"`` -> 6 bytes.

    Raises
    ------
    ValueError
        If ``mac`` is not six colon-separated hex bytes.
    """
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"bad MAC address {mac!r}")
    return bytes(int(p, 16) for p in parts)


def mac_str(raw: bytes) -> str:
    """6 bytes -> ``"02:00:00:00:00:01"``."""
    return ":".join(f"{b:02x}" for b in raw)


def ipv4_checksum(header: bytes) -> int:
    """RFC 791 header checksum of ``header`` (0 when the header's own checksum is right;
    with its checksum field zero, the value to write there)."""
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


_IPV4_HDR = header_struct(IPV4)
_UDP_HDR = header_struct(UDP)
_CSUM = offset("ip_csum") - IPV4_OFFSET


def ethernet_header(dst_mac: str, src_mac: str, ethertype: int = ETHERTYPE_IPV4) -> bytes:
    """Ethernet II header."""
    return mac_bytes(dst_mac) + mac_bytes(src_mac) + struct.pack("!H", ethertype)


def ipv4_header(src: bytes, dst: bytes, payload_len: int, ttl: int = DEFAULT_TTL,
                ident: int = 0, frag: int = 0, proto: int = IP_PROTO_UDP) -> bytes:
    """IPv4 header without options, checksum filled in (``src``/``dst``: 4 bytes each)."""
    ip = _IPV4_HDR.pack(IPV4_VER_IHL, 0, IPV4_HEADER_BYTES + payload_len, ident, frag, ttl,
                        proto, 0, src, dst)
    return ip[:_CSUM] + struct.pack("!H", ipv4_checksum(ip)) + ip[_CSUM + 2:]


def udp_header(sport: int, dport: int, payload_len: int) -> bytes:
    """UDP header with checksum 0."""
    return _UDP_HDR.pack(sport, dport, UDP_HEADER_BYTES + payload_len, 0)


def udp_frame(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, payload: bytes,
              sport: int = lay.THC_UDP_PORT, dport: int = lay.THC_UDP_PORT,
              ttl: int = DEFAULT_TTL) -> bytes:
    """Ethernet/IPv4/UDP frame carrying ``payload`` (UDP checksum 0, allowed for IPv4)."""
    src, dst = ipaddress.IPv4Address(src_ip).packed, ipaddress.IPv4Address(dst_ip).packed
    return (ethernet_header(dst_mac, src_mac)
            + ipv4_header(src, dst, UDP_HEADER_BYTES + len(payload), ttl)
            + udp_header(sport, dport, len(payload)) + payload)


_READ = frame_struct(("dst_mac", "ethertype", "verihl", "proto", "src", "dst", "dport"))


def read_udp_frame(frame: bytes, dport: int = lay.THC_UDP_PORT
                   ) -> tuple[str, str, str, bytes] | None:
    """(dst MAC, IPv4 source, IPv4 destination, UDP payload) of an Ethernet/IPv4/UDP frame to
    UDP port ``dport`` (the payload runs to the end of the frame), else ``None``."""
    if len(frame) < THC_OFFSET:
        return None
    dmac, etype, vihl, proto, src, dst, port = _READ.unpack_from(frame)
    if etype != ETHERTYPE_IPV4 or vihl != IPV4_VER_IHL or proto != IP_PROTO_UDP or port != dport:
        return None
    return (mac_str(dmac), str(ipaddress.IPv4Address(src)), str(ipaddress.IPv4Address(dst)),
            bytes(frame[THC_OFFSET:]))
