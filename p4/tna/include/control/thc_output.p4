// THC output on Tofino, one table. Passes 0 and 1 (data) recirculate: the recirc header in
// front, egress bypassed; pass 1 hands pass 2 its decision (out_*) and the second half's
// word index. The last pass (2 for data, 1 for norms) finishes the message like the v1model
// thc_output.p4: multicast to the job's group, unicast back where the packet entered (stored
// result, PEEK), or up to the parent. Absorbed contributions are dropped there.
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

    action recirculate_first() {
        hdr.recirc.in_port = ig_intr_md.ingress_port;
        ig_tm_md.ucast_egress_port = RECIRC_PORT;
        ig_tm_md.bypass_egress = 1;
    }
    action recirculate_second() {
        hdr.recirc.pass = 2;
        hdr.recirc.word_index = hdr.recirc.cell + THC_CELLS;
        hdr.recirc.out_action = meta.out_action;
        hdr.recirc.out_flags = meta.out_flags;
        hdr.recirc.out_count = meta.out_count;
        hdr.recirc.out_bitmap = meta.out_bitmap;
        ig_tm_md.ucast_egress_port = RECIRC_PORT;
        ig_tm_md.bypass_egress = 1;
    }
    action absorb() {
        ig_dprsr_md.drop_ctl = 1;
    }
    // Shared by the three ways out: the result header and the UDP/IPv4 lengths of the kind.
    action finish(bit<8> msg_type, bit<8> lane_bits, bit<16> udp_len) {
        hdr.recirc.setInvalid();
        hdr.thc.msg_type = msg_type;
        hdr.thc.lane_bits = lane_bits;
        hdr.thc.flags = meta.out_flags;
        hdr.thc.count = meta.out_count;
        hdr.thc.bitmap = meta.out_bitmap;
        hdr.udp.src_port = THC_UDP_PORT;
        hdr.udp.checksum = 0;
        hdr.udp.length = udp_len;
        hdr.ipv4.total_len = udp_len + IPV4_HEADER_BYTES;
        hdr.ipv4.ttl = RESULT_TTL;
    }
    action up(bit<8> msg_type, bit<8> lane_bits, bit<16> udp_len) {
        finish(msg_type, lane_bits, udp_len);
        hdr.thc.rank = meta.job.self_id;
        hdr.ipv4.src_addr = meta.job.self_addr;
        hdr.ipv4.dst_addr = meta.job.parent_addr;
        ig_tm_md.ucast_egress_port = meta.job.parent_port;
        meta.count_result = 1;
    }
    // RESENT or PEEK; the rank stays the requester's.
    action answer(bit<8> msg_type, bit<8> lane_bits, bit<16> udp_len) {
        ig_tm_md.ucast_egress_port = hdr.recirc.in_port;   // before finish drops recirc
        finish(msg_type, lane_bits, udp_len);
        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
        hdr.ipv4.src_addr = meta.job.self_addr;
        mac_t m = hdr.ethernet.dst_addr;
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = m;
    }
    action answer_resent(bit<8> msg_type, bit<8> lane_bits, bit<16> udp_len) {
        answer(msg_type, lane_bits, udp_len);
        meta.count_resent = 1;
    }
    action multicast(bit<8> msg_type, bit<8> lane_bits, bit<16> udp_len) {
        finish(msg_type, lane_bits, udp_len);
        hdr.thc.rank = THC_RANK_ALL;
        hdr.ipv4.src_addr = meta.job.self_addr;
        ig_tm_md.mcast_grp_a = meta.job.mcast_grp;
        meta.count_result = 1;
    }

    table outputs {
        key = {
            meta.pass: exact;
            meta.kind: exact;
            meta.out_action: ternary;
            meta.out_flags: ternary;
        }
        actions = { recirculate_first; recirculate_second; absorb; up; answer; answer_resent; multicast;
                    NoAction; }
        default_action = NoAction();
        size = 32;
        const entries = {
            (0, KIND_DATA, _, _): recirculate_first();
            (0, KIND_NORM, _, _): recirculate_first();
            (1, KIND_DATA, _, _): recirculate_second();
            (2, KIND_DATA, OUT_ABSORB, _): absorb();
            (1, KIND_NORM, OUT_ABSORB, _): absorb();
            (2, KIND_DATA, OUT_UP, _): up(MSG_PARTIAL, 8, THC_UDP_LEN_LANES8);
            (1, KIND_NORM, OUT_UP, _): up(MSG_NORM_PARTIAL, 32, THC_UDP_LEN_NORMS);
            (2, KIND_DATA, OUT_ANSWER, FLAG_RESENT): answer_resent(MSG_RESULT, 8, THC_UDP_LEN_LANES8);
            (1, KIND_NORM, OUT_ANSWER, FLAG_RESENT): answer_resent(MSG_NORM_RESULT, 32, THC_UDP_LEN_NORMS);
            (2, KIND_DATA, OUT_ANSWER, _): answer(MSG_RESULT, 8, THC_UDP_LEN_LANES8);
            (1, KIND_NORM, OUT_ANSWER, _): answer(MSG_NORM_RESULT, 32, THC_UDP_LEN_NORMS);
            (2, KIND_DATA, OUT_MULTICAST, _): multicast(MSG_RESULT, 8, THC_UDP_LEN_LANES8);
            (1, KIND_NORM, OUT_MULTICAST, _): multicast(MSG_NORM_RESULT, 32, THC_UDP_LEN_NORMS);
        }
    }

    apply {
        outputs.apply();
        // Counted here, not in the actions: Tofino addresses an indirect counter the same way
        // in every action of a table.
        if (meta.count_result == 1) {
            results.count(meta.job.index);
        }
        if (meta.count_resent == 1) {
            resent.count(meta.job.index);
        }
    }
}

#endif
