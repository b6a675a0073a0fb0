"""host/protocol/framing.py: the one home of Ethernet/IPv4/UDP framing."""

from __future__ import annotations

import ipaddress

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from host.protocol import framing as fr
from host.protocol import layout as lay


def test_offsets_follow_the_headers():
    assert (fr.IPV4_OFFSET, fr.UDP_OFFSET, fr.THC_OFFSET) == (14, 34, 42)
    assert fr.PAYLOAD_OFFSET == fr.THC_OFFSET + lay.THC_HEADER_BYTES
    assert fr.offset("ethertype") == 12 and fr.offset("dst") == 30 and fr.offset("dport") == 36
    assert fr.offset("version") == fr.THC_OFFSET
    assert fr.frame_struct(("ethertype", "verihl", "proto", "dst", "dport", "udp_len")).size == 40


def test_udp_frame_is_what_scapy_reads():
    f = fr.udp_frame("02:00:00:00:00:01", "02:00:00:00:ff:fe", "10.0.0.1", "10.0.0.2", b"xyz",
                     1234, lay.THC_UDP_PORT, ttl=7)
    p = Ether(f)
    assert p[Ether].dst == "02:00:00:00:ff:fe" and p[Ether].src == "02:00:00:00:00:01"
    assert p[IP].src == "10.0.0.1" and p[IP].ttl == 7 and p[IP].len == 20 + 8 + 3
    assert p[UDP].sport == 1234 and p[UDP].dport == lay.THC_UDP_PORT and bytes(p[UDP].payload) == b"xyz"
    q = p[IP].copy()
    del q.chksum
    assert IP(bytes(q)).chksum == p[IP].chksum   # scapy's own checksum of the same header
    assert fr.ipv4_checksum(f[fr.IPV4_OFFSET:fr.UDP_OFFSET]) == 0


def test_read_udp_frame_round_trip_and_rejects():
    f = fr.udp_frame("02:00:00:00:00:01", "02:00:00:00:ff:fe", "10.0.0.1", "10.0.0.2", b"abc")
    assert fr.read_udp_frame(f) == ("02:00:00:00:ff:fe", "10.0.0.1", "10.0.0.2", b"abc")
    assert fr.read_udp_frame(f[: fr.THC_OFFSET - 1]) is None
    assert fr.read_udp_frame(f, dport=9) is None
    arp = f[:12] + b"\x08\x06" + f[14:]
    assert fr.read_udp_frame(arp) is None
    assert ipaddress.IPv4Address(f[fr.offset("src"): fr.offset("src") + 4]) == \
        ipaddress.IPv4Address("10.0.0.1")


def test_bad_mac_is_one_clear_error():
    with pytest.raises(ValueError, match="bad MAC address"):
        fr.mac_bytes("02:00:00")
    assert fr.mac_str(fr.mac_bytes("02:0a:00:00:00:ff")) == "02:0a:00:00:00:ff"
