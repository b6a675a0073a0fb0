"""Build and read Ethernet/IPv4/UDP frames around THC messages (benchmarks, tests, tools).

The THC part comes from :mod:`host.protocol.codec`; this module only adds the outer headers
(``docs/protocol.md``, "Encapsulation": IPv4 without options, UDP port ``THC_UDP_PORT``).
"""

from __future__ import annotations

import ipaddress
import struct

from host.protocol import codec
from host.protocol import layout as lay

_ETH = struct.Struct("!6s6sH")
_IP = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")


def mac_bytes(mac: str) -> bytes:
    """``02:00:...`` as 6 bytes."""
    return bytes(int(x, 16) for x in mac.split(":"))


def ipv4_checksum(header: bytes) -> int:
    """RFC 791 header checksum of ``header`` (with its checksum field zero)."""
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def udp_frame(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, payload: bytes,
              sport: int = lay.THC_UDP_PORT, dport: int = lay.THC_UDP_PORT, ttl: int = 64) -> bytes:
    """Ethernet/IPv4/UDP frame carrying ``payload`` (UDP checksum 0, allowed for IPv4)."""
    total = 20 + 8 + len(payload)
    src, dst = ipaddress.IPv4Address(src_ip).packed, ipaddress.IPv4Address(dst_ip).packed
    ip = _IP.pack(0x45, 0, total, 0, 0, ttl, 17, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", ipv4_checksum(ip)) + ip[12:]
    return (_ETH.pack(mac_bytes(dst_mac), mac_bytes(src_mac), 0x0800) + ip
            + _UDP.pack(sport, dport, 8 + len(payload), 0) + payload)


def thc_frame(src_mac: str, src_ip: str, dst_ip: str, header: codec.Header, values,
              dst_mac: str = "02:00:00:00:ff:fe") -> bytes:
    """A THC message (``codec.encode(header, values)``) in a frame from ``src_ip``."""
    return udp_frame(src_mac, dst_mac, src_ip, dst_ip, codec.encode(header, values))


def read_frame(frame: bytes) -> tuple[str, str, str, codec.Message] | None:
    """(dst MAC, IPv4 source, IPv4 destination, THC message) of a THC frame, else ``None``."""
    if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[14] != 0x45 or frame[23] != 17:
        return None
    if struct.unpack("!H", frame[36:38])[0] != lay.THC_UDP_PORT:
        return None
    dst_mac = ":".join(f"{b:02x}" for b in frame[0:6])
    src = str(ipaddress.IPv4Address(frame[26:30]))
    dst = str(ipaddress.IPv4Address(frame[30:34]))
    return dst_mac, src, dst, codec.decode(frame[42:])
