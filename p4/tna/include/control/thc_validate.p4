// THC validation (pass 0): header checks, job lookup, sender binding, exactly as the v1model
// program's thc_validate.p4 and with the same P4Info names, so one controller drives both.
// The jobs table is also applied on pass 1 (the job's parameters are not carried through the
// recirculation); the checks run on pass 0 only. Differences from v1model, both forced by
// the hardware: the job's lanes must be 8 bits (THC_LANE_BITS_TNA) and DATA must carry
// table values (lane_bits 8); indices (lane_bits 4) are dropped as LANE_UNSUPPORTED.
#ifndef NETCO_TNA_THC_VALIDATE_P4
#define NETCO_TNA_THC_VALIDATE_P4

control ThcValidate(inout headers_t hdr, inout ingress_metadata_t meta,
                    in ingress_intrinsic_metadata_t ig_intr_md,
                    in ingress_intrinsic_metadata_from_parser_t ig_prsr_md) {
    @name(".ingress.thc_validate.set_job")
    action set_job(bit<8> index, bit<16> slot_base, bit<16> num_slots, bit<8> expected,
                   bit<8> lane_bits, bit<16> mcast_grp, bit<1> has_parent, port_t parent_port,
                   ip4_t parent_addr, ip4_t self_addr, bit<8> self_id) {
        meta.job.index = index;
        meta.job.slot_base = slot_base;
        meta.job.slot_room = num_slots |-| hdr.thc.slot;
        meta.job.expected = expected;
        meta.job.expected_m1 = expected - 1;
        meta.job.lane_bits = lane_bits;
        meta.job.mcast_grp = mcast_grp;
        meta.job.has_parent = has_parent;
        meta.job.parent_port = parent_port;
        meta.job.parent_port_x = parent_port ^ ig_intr_md.ingress_port;
        meta.job.parent_addr = parent_addr;
        meta.job.parent_addr_x = parent_addr ^ hdr.ipv4.src_addr;
        meta.job.self_addr = self_addr;
        meta.job.self_id = self_id;
    }
    @name(".ingress.thc_validate.unknown_job")
    action unknown_job() {
        meta.drop_reason = DROP_UNKNOWN_JOB;
    }
    @name(".ingress.thc_validate.jobs")
    table jobs {
        key = { hdr.thc.job_id: exact @name("job_id"); }
        actions = { set_job; @defaultonly unknown_job; }
        default_action = unknown_job();
        size = MAX_JOBS;
    }

    @name(".ingress.thc_validate.sender")
    action sender(bit<1> is_switch) {
        meta.from_switch = is_switch;
    }
    @name(".ingress.thc_validate.bad_sender")
    action bad_sender() {
        meta.drop_reason = DROP_BAD_SENDER;
    }
    @name(".ingress.thc_validate.senders")
    table senders {
        key = {
            hdr.thc.job_id: exact @name("job_id");
            hdr.thc.rank: exact @name("rank");
            ig_intr_md.ingress_port: exact @name("ingress_port");
            hdr.ipv4.src_addr: exact @name("src_addr");
        }
        actions = { sender; @defaultonly bad_sender; }
        default_action = bad_sender();
        size = SENDERS_TABLE_SIZE;
    }

    // Message type -> kind, direction and the cell offset of (kind, set); only consistent
    // (slot_set, round parity) pairs have entries, anything else is malformed.
    action classify(bit<1> kind, bit<1> is_up, bit<16> ks_offset, bit<16> max_elems_p1) {
        meta.kind = kind;
        meta.is_up = is_up;
        meta.slot_ks = hdr.thc.slot + ks_offset;
        meta.elems_room = max_elems_p1 |-| hdr.thc.elem_count;   // 0: more than the payload holds
    }
    action unclassified() {
        meta.drop_reason = DROP_MALFORMED;
    }
    table message_kinds {
        key = {
            hdr.thc.msg_type: exact;
            hdr.thc.slot_set: exact;
            hdr.thc.round[0:0]: exact;
        }
        actions = { classify; @defaultonly unclassified; }
        default_action = unclassified();
        size = 16;
        const entries = {
            (MSG_DATA, 0, 0): classify(KIND_DATA, 1, 0 * THC_SLOTS, THC_COORDS + 1);
            (MSG_DATA, 1, 1): classify(KIND_DATA, 1, 1 * THC_SLOTS, THC_COORDS + 1);
            (MSG_PARTIAL, 0, 0): classify(KIND_DATA, 1, 0 * THC_SLOTS, THC_COORDS + 1);
            (MSG_PARTIAL, 1, 1): classify(KIND_DATA, 1, 1 * THC_SLOTS, THC_COORDS + 1);
            (MSG_RESULT, 0, 0): classify(KIND_DATA, 0, 0 * THC_SLOTS, THC_COORDS + 1);
            (MSG_RESULT, 1, 1): classify(KIND_DATA, 0, 1 * THC_SLOTS, THC_COORDS + 1);
            (MSG_NORM, 0, 0): classify(KIND_NORM, 1, 2 * THC_SLOTS, THC_NORMS + 1);
            (MSG_NORM, 1, 1): classify(KIND_NORM, 1, 3 * THC_SLOTS, THC_NORMS + 1);
            (MSG_NORM_PARTIAL, 0, 0): classify(KIND_NORM, 1, 2 * THC_SLOTS, THC_NORMS + 1);
            (MSG_NORM_PARTIAL, 1, 1): classify(KIND_NORM, 1, 3 * THC_SLOTS, THC_NORMS + 1);
            (MSG_NORM_RESULT, 0, 0): classify(KIND_NORM, 0, 2 * THC_SLOTS, THC_NORMS + 1);
            (MSG_NORM_RESULT, 1, 1): classify(KIND_NORM, 0, 3 * THC_SLOTS, THC_NORMS + 1);
        }
    }

    // This contributor's bit (Tofino has no shift by a variable amount).
    action set_contrib_bit(bit<32> bit_) {
        meta.contrib_bit = bit_;
    }
    action rank_out_of_range() {
        meta.rank_over = 1;      // >= THC_MAX_WORKERS: no bitmap bit (fine for rank 255 results)
    }
    table contributor_bits {
        key = { hdr.thc.rank: exact; }
        actions = { set_contrib_bit; @defaultonly rank_out_of_range; }
        default_action = rank_out_of_range();
        size = THC_MAX_WORKERS;
        const entries = {
#include "generated_contributor_bits.p4"
        }
    }

    apply {
        jobs.apply();
        contributor_bits.apply();
        if (hdr.recirc.isValid()) {
            // Pass 1: everything below was checked on pass 0.
        } else if (ig_prsr_md.parser_err != 0) {
            meta.drop_reason = DROP_SHORT;
        } else if (hdr.thc.version != THC_VERSION) {
            meta.drop_reason = DROP_BAD_VERSION;
        } else if (hdr.thc.msg_type == 0 || hdr.thc.msg_type > MSG_NORM_PARTIAL) {
            meta.drop_reason = DROP_BAD_TYPE;
        } else if (hdr.thc.msg_type == MSG_DATA && hdr.thc.lane_bits == THC_INDEX_BITS) {
            meta.drop_reason = DROP_LANE_UNSUPPORTED;   // indices need the per-lane lookup
        } else if (!hdr.seg_a.isValid()) {
            meta.drop_reason = DROP_MALFORMED;          // no payload this target aggregates
        } else {
            message_kinds.apply();
            if (meta.drop_reason == 0) {
                if (meta.elems_room == 0) {
                    meta.drop_reason = DROP_MALFORMED;
                } else if (meta.is_up == 1 && meta.rank_over == 1) {
                    meta.drop_reason = DROP_MALFORMED;
                }
            }
            if (meta.drop_reason == 0) {
                if (meta.kind == KIND_DATA && meta.job.lane_bits != 8) {
                    meta.drop_reason = DROP_LANE_UNSUPPORTED;   // packed 8-bit lanes only
                } else if (meta.job.slot_room == 0) {
                    meta.drop_reason = DROP_BAD_SLOT;
                } else if (meta.is_up == 1) {
                    senders.apply();
                    if (meta.drop_reason == 0) {
                        if (hdr.thc.msg_type == MSG_PARTIAL || hdr.thc.msg_type == MSG_NORM_PARTIAL) {
                            if (meta.from_switch == 0) {
                                meta.drop_reason = DROP_BAD_SENDER;
                            }
                        } else if (meta.from_switch == 1) {
                            meta.drop_reason = DROP_BAD_SENDER;
                        }
                    }
                } else if (meta.job.has_parent == 0 || meta.job.parent_port_x != 0
                           || meta.job.parent_addr_x != 0) {
                    meta.drop_reason = DROP_BAD_SENDER;   // results only come from our parent
                }
            }
        }
    }
}

#endif
