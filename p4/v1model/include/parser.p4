// Parser and deparser: Ethernet / IPv4 (no options, not fragmented) / UDP / THC / payload.
// The THC payload layout is chosen by (msg_type, lane_bits); an undefined combination parses
// no payload and the validation control drops it as malformed. A packet that ends early sets
// standard_metadata.parser_error and is dropped as SHORT before any state is touched.
#ifndef NETCO_PARSER_P4
#define NETCO_PARSER_P4

parser ThcParser(packet_in pkt, out headers_t hdr, inout local_metadata_t meta,
                 inout standard_metadata_t std) {
    state start {
        transition parse_ethernet;
    }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (4w5, 13w0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            THC_UDP_PORT: parse_thc;
            default: accept;
        }
    }
    state parse_thc {
        pkt.extract(hdr.thc);
        transition select(hdr.thc.msg_type, hdr.thc.lane_bits) {
            (MSG_DATA, 8w4): parse_indices;
            (MSG_DATA, 8w8): parse_lanes8;        // values uplink (table values)
            (MSG_RESULT, 8w8): parse_lanes8;
            (MSG_PARTIAL, 8w8): parse_lanes8;
            (MSG_RESULT, 8w16): parse_lanes16;
            (MSG_PARTIAL, 8w16): parse_lanes16;
            (MSG_RESULT, 8w32): parse_lanes32;
            (MSG_PARTIAL, 8w32): parse_lanes32;
            (MSG_NORM, 8w32): parse_norms;
            (MSG_NORM_RESULT, 8w32): parse_norms;
            (MSG_NORM_PARTIAL, 8w32): parse_norms;
            default: accept;
        }
    }
    state parse_indices {
        pkt.extract(hdr.indices);
        transition accept;
    }
    state parse_lanes8 {
        pkt.extract(hdr.lanes8);
        transition accept;
    }
    state parse_lanes16 {
        pkt.extract(hdr.lanes16);
        transition accept;
    }
    state parse_lanes32 {
        pkt.extract(hdr.lanes32);
        transition accept;
    }
    state parse_norms {
        pkt.extract(hdr.norms);
        transition accept;
    }
}

control ThcDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.thc);
        pkt.emit(hdr.indices);
        pkt.emit(hdr.lanes8);
        pkt.emit(hdr.lanes16);
        pkt.emit(hdr.lanes32);
        pkt.emit(hdr.norms);
    }
}

#endif
