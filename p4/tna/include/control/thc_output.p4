// THC output on Tofino. Pass 0: recirculate (recirc header in front, egress bypassed).
// Pass 1: finish the message like the v1model thc_output.p4: multicast to the job's group,
// unicast back where the packet entered (stored result, PEEK), or up to the parent.
// Absorbed contributions are dropped here.
#ifndef NETCO_TNA_THC_OUTPUT_P4
#define NETCO_TNA_THC_OUTPUT_P4

control ThcOutput(inout headers_t hdr, inout ingress_metadata_t meta,
                  in ingress_intrinsic_metadata_t ig_intr_md,
                  inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                  inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    @name(".ingress.thc_output.results")
    Counter<bit<32>, bit<8>>(MAX_JOBS, CounterType_t.PACKETS) results;
    @name(".ingress.thc_output.resent")
    Counter<bit<32>, bit<8>>(MAX_JOBS, CounterType_t.PACKETS) resent;

    apply {
        if (meta.pass == 0) {
            hdr.recirc.in_port = ig_intr_md.ingress_port;
            ig_tm_md.ucast_egress_port = RECIRC_PORT;
            ig_tm_md.bypass_egress = 1;
        } else if (meta.out_action == OUT_ABSORB) {
            ig_dprsr_md.drop_ctl = 1;
        } else {
            PortId_t in_port = hdr.recirc.in_port;
            hdr.recirc.setInvalid();
            bool norm = meta.kind == KIND_NORM;
            bit<8> up_type = MSG_PARTIAL;
            bit<8> down_type = MSG_RESULT;
            if (norm) {
                up_type = MSG_NORM_PARTIAL;
                down_type = MSG_NORM_RESULT;
            }
            hdr.thc.count = meta.out_count;
            hdr.thc.bitmap = meta.out_bitmap;
            hdr.udp.src_port = THC_UDP_PORT;
            hdr.udp.checksum = 0;
            if (norm) {
                hdr.thc.lane_bits = 32;
                hdr.udp.length = THC_UDP_LEN_NORMS;
            } else {
                hdr.thc.lane_bits = 8;
                hdr.udp.length = THC_UDP_LEN_LANES8;
            }
            hdr.ipv4.total_len = hdr.udp.length + IPV4_HEADER_BYTES;
            hdr.ipv4.ttl = RESULT_TTL;
            if (meta.out_action == OUT_UP) {
                hdr.thc.msg_type = up_type;
                hdr.thc.rank = meta.job.self_id;
                hdr.thc.flags = meta.out_flags;
                hdr.ipv4.src_addr = meta.job.self_addr;
                hdr.ipv4.dst_addr = meta.job.parent_addr;
                ig_tm_md.ucast_egress_port = meta.job.parent_port;
                results.count(meta.job.index);
            } else if (meta.out_action == OUT_ANSWER) {
                hdr.thc.msg_type = down_type;
                hdr.thc.flags = meta.out_flags;   // RESENT or PEEK; rank stays the requester's
                hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
                hdr.ipv4.src_addr = meta.job.self_addr;
                mac_t m = hdr.ethernet.dst_addr;
                hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
                hdr.ethernet.src_addr = m;
                ig_tm_md.ucast_egress_port = in_port;
                if (meta.out_flags == FLAG_RESENT) {
                    resent.count(meta.job.index);
                }
            } else {
                hdr.thc.msg_type = down_type;
                hdr.thc.rank = THC_RANK_ALL;
                hdr.thc.flags = meta.out_flags;
                hdr.ipv4.src_addr = meta.job.self_addr;
                ig_tm_md.mcast_grp_a = meta.job.mcast_grp;
                results.count(meta.job.index);
            }
        }
    }
}

#endif
