// TNA parsers and deparsers. Ingress: [recirc] Ethernet / IPv4 / UDP / THC / payload segments.
// From the wire (pass 0) the payload is parsed only for the (msg_type, lane_bits)
// combinations this target aggregates; any other THC packet parses no payload and validation
// drops it. A packet that ends early sets the parser error and is dropped as SHORT before any
// state is touched: both segments of a 256-byte payload are parsed in pass 0 for that reason,
// the first into seg_b (header.p4: the deparser emits seg_b first, so pass 0 forwards the
// payload unchanged). Recirculated packets (passes 1, 2) were validated on pass 0: their
// parser takes the headers in one state and the payload into seg_a first.
// Egress parses headers only (never the payload) and recomputes the IPv4 checksum.
#ifndef NETCO_TNA_PARSER_P4
#define NETCO_TNA_PARSER_P4

parser ThcIngressParser(packet_in pkt, out headers_t hdr, out ingress_metadata_t meta,
                        out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        transition select(ig_intr_md.ingress_port) {
            RECIRC_PORT: parse_recirc;
            default: parse_ethernet;
        }
    }
    state parse_recirc {
        pkt.extract(hdr.recirc);
        meta.pass = hdr.recirc.pass;
        meta.acc_mode = hdr.recirc.acc_mode;
        meta.word_index = hdr.recirc.word_index;
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.thc);
        transition select(hdr.thc.lane_bits) {
            8w32: parse_one_segment;                  // norms
            default: parse_two_segments;
        }
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
            (MSG_DATA, 8w8): parse_two_segments_wire;      // values uplink (8-bit values)
            (MSG_PARTIAL, 8w8): parse_two_segments_wire;
            (MSG_RESULT, 8w8): parse_two_segments_wire;
            (MSG_NORM, 8w32): parse_one_segment;
            (MSG_NORM_PARTIAL, 8w32): parse_one_segment;
            (MSG_NORM_RESULT, 8w32): parse_one_segment;
            default: accept;
        }
    }
    state parse_two_segments_wire {
        pkt.extract(hdr.seg_b);
        pkt.extract(hdr.seg_a);
        transition accept;
    }
    state parse_two_segments {
        pkt.extract(hdr.seg_a);
        pkt.extract(hdr.seg_b);
        transition accept;
    }
    state parse_one_segment {
        pkt.extract(hdr.seg_a);
        transition accept;
    }
}

control ThcIngressDeparser(packet_out pkt, inout headers_t hdr, in ingress_metadata_t meta,
                           in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    apply {
        pkt.emit(hdr.recirc);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.thc);
        pkt.emit(hdr.seg_b);   // see header.p4: pass 0 keeps the order, 1 and 2 rotate
        pkt.emit(hdr.seg_a);
    }
}

parser ThcEgressParser(packet_in pkt, out headers_t hdr, out egress_metadata_t meta,
                       out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
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
        transition accept;
    }
}

control ThcEgressDeparser(packet_out pkt, inout headers_t hdr, in egress_metadata_t meta,
                          in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;
    apply {
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.hdr_checksum = ipv4_checksum.update({
                hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp_ecn, hdr.ipv4.total_len,
                hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
                hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr });
        }
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.thc);
    }
}

#endif
