// Wire headers every target parses the same way (Ethernet, IPv4, UDP). The THC header and
// payload types come from generated_protocol.p4 (generated from host/protocol/layout.py).
#ifndef NETCO_SHARED_HEADER_P4
#define NETCO_SHARED_HEADER_P4

header ethernet_h {
    mac_t  dst_addr;
    mac_t  src_addr;
    bit<16> ether_type;
}

header ipv4_h {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  dscp_ecn;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    ip4_t   src_addr;
    ip4_t   dst_addr;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

#endif
