"""Build and read THC frames (benchmarks, tests, tools).

The THC part comes from :mod:`host.protocol.codec`, the Ethernet/IPv4/UDP part from
:mod:`host.protocol.framing` (``docs/protocol.md``, "Encapsulation").
"""

from __future__ import annotations

from host.protocol import codec
from host.protocol import layout as lay
from host.protocol.framing import ipv4_checksum, mac_bytes, read_udp_frame, udp_frame

__all__ = ["ipv4_checksum", "mac_bytes", "read_frame", "thc_frame", "udp_frame"]


def thc_frame(src_mac: str, src_ip: str, dst_ip: str, header: codec.Header, values,
              dst_mac: str = "02:00:00:00:ff:fe", coords: int = lay.COORDS_PER_PACKET,
              sport: int = lay.THC_UDP_PORT) -> bytes:
    """A THC message (``codec.encode(header, values, coords)``) in a frame from ``src_ip``
    (UDP source port ``sport``)."""
    return udp_frame(src_mac, dst_mac, src_ip, dst_ip, codec.encode(header, values, coords),
                     sport=sport)


def read_frame(frame: bytes, coords: int = lay.COORDS_PER_PACKET
               ) -> tuple[str, str, str, codec.Message] | None:
    """(dst MAC, IPv4 source, IPv4 destination, THC message at packet width ``coords``) of a
    THC frame, else ``None``."""
    got = read_udp_frame(frame)
    if got is None:
        return None
    dst_mac, src, dst, payload = got
    return dst_mac, src, dst, codec.decode(payload, coords)
