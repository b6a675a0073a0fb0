// THC output: finish the outgoing message header, set addresses and choose where it goes:
// multicast to the job's group (complete slot or the parent's result), unicast back to the
// sender (stored result answering a retransmission), or up to the parent (partial aggregate
// as one contributor). Absorbed contributions are consumed here.
#ifndef NETCO_THC_OUTPUT_P4
#define NETCO_THC_OUTPUT_P4

control ThcOutput(inout headers_t hdr, inout local_metadata_t meta,
                  inout standard_metadata_t std) {
    @name(".ingress.thc_output.results")
    counter(MAX_JOBS, CounterType.packets) results;
    @name(".ingress.thc_output.resent")
    counter(MAX_JOBS, CounterType.packets) resent;

    apply {
        if (meta.out_action == OUT_ABSORB) {
            mark_to_drop(std);
        } else {
            bool norm = meta.kind == KIND_NORM;
            hdr.thc.count = meta.out_count;
            hdr.thc.bitmap = meta.out_bitmap;
            hdr.udp.src_port = THC_UDP_PORT;
            hdr.udp.checksum = 0;
            if (norm) {
                hdr.thc.lane_bits = 32;
                hdr.udp.length = THC_UDP_LEN_NORMS;
            } else {
                hdr.thc.lane_bits = meta.job.lane_bits;
                if (meta.job.lane_bits == 8) {
                    hdr.udp.length = THC_UDP_LEN_LANES8;
                } else if (meta.job.lane_bits == 16) {
                    hdr.udp.length = THC_UDP_LEN_LANES16;
                } else {
                    hdr.udp.length = THC_UDP_LEN_LANES32;
                }
            }
            hdr.ipv4.total_len = hdr.udp.length + IPV4_HEADER_BYTES;
            hdr.ipv4.ttl = RESULT_TTL;
            if (meta.out_action == OUT_UP) {
                hdr.thc.msg_type = norm ? MSG_NORM_PARTIAL : MSG_PARTIAL;
                hdr.thc.rank = meta.job.self_id;
                hdr.thc.flags = meta.out_flags;
                hdr.ipv4.src_addr = meta.job.self_addr;
                hdr.ipv4.dst_addr = meta.job.parent_addr;
                std.egress_spec = meta.job.parent_port;
                results.count((bit<32>)meta.job.index);
            } else if (meta.out_action == OUT_ANSWER) {
                hdr.thc.msg_type = norm ? MSG_NORM_RESULT : MSG_RESULT;
                hdr.thc.flags = meta.out_flags;   // RESENT or PEEK; rank stays the requester's
                hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
                hdr.ipv4.src_addr = meta.job.self_addr;
                mac_t m = hdr.ethernet.dst_addr;
                hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
                hdr.ethernet.src_addr = m;
                std.egress_spec = std.ingress_port;
                if (meta.out_flags == FLAG_RESENT) {
                    resent.count((bit<32>)meta.job.index);
                }
            } else {
                hdr.thc.msg_type = norm ? MSG_NORM_RESULT : MSG_RESULT;
                hdr.thc.rank = THC_RANK_ALL;
                hdr.thc.flags = meta.out_flags;
                hdr.ipv4.src_addr = meta.job.self_addr;
                std.mcast_grp = meta.job.mcast_grp;
                results.count((bit<32>)meta.job.index);
            }
        }
    }
}

#endif
