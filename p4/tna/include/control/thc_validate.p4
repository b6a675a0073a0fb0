// THC validation (pass 0): header checks, job lookup, sender binding, as the v1model
// program's thc_validate.p4 and with the same P4Info names, so one controller drives both.
// Laid out for Tofino's stages: the header table, jobs, contributor bits and senders are
// looked up side by side, then one ternary table (checks) turns what they found into the
// first drop reason. The jobs table is also applied on passes 1 and 2 (the job's parameters
// are not carried through the recirculation). Differences from v1model, both forced by the
// hardware: the job's lanes must be 8 bits and DATA must carry table values (lane_bits 8);
// indices (lane_bits 4) are dropped as LANE_UNSUPPORTED.
#ifndef NETCO_TNA_THC_VALIDATE_P4
#define NETCO_TNA_THC_VALIDATE_P4

control ThcValidate(inout headers_t hdr, inout ingress_metadata_t meta,
                    in ingress_intrinsic_metadata_t ig_intr_md,
                    in ingress_intrinsic_metadata_from_parser_t ig_prsr_md) {
    @name(".ingress.thc_validate.set_job")
    action set_job(bit<8> index, bit<16> slot_base, bit<16> num_slots, bit<8> expected,
                   bit<8> lane_bits, bit<16> mcast_grp, bit<1> has_parent, port_t parent_port,
                   ip4_t parent_addr, ip4_t self_addr, bit<8> self_id,
                   bit<32> token) {
        meta.job.index = index;
        meta.job.slot_base = slot_base;
        meta.job.slot_room = num_slots |-| hdr.thc.slot;
        meta.job.expected = expected;
        meta.job.expected_m1 = expected - 1;
        meta.job.lane_bits = lane_bits;
        meta.job.lane_x = lane_bits ^ 8;      // 0: the packed 8-bit lanes this target adds
        meta.job_ok = 1;
        meta.job.mcast_grp = mcast_grp;
        meta.job.has_parent = has_parent;
        meta.job.parent_port = parent_port;
        meta.job.parent_port_x = parent_port ^ ig_intr_md.ingress_port;
        meta.job.parent_addr = parent_addr;
        meta.job.parent_addr_x = parent_addr ^ hdr.ipv4.src_addr;
        meta.job.self_addr = self_addr;
        meta.job.self_id = self_id;
        meta.job.token_x = token ^ hdr.thc.token;   // compared in checks, this stage's data
    }
    @name(".ingress.thc_validate.unknown_job")
    action unknown_job() {
        meta.job_ok = 0;                      // the checks table drops it as UNKNOWN_JOB
    }
    @name(".ingress.thc_validate.jobs")
    table jobs {
        key = { hdr.thc.job_id: exact @name("job_id"); }
        actions = { set_job; @defaultonly unknown_job; }
        default_action = unknown_job();
        size = MAX_JOBS;
    }

    @name(".ingress.thc_validate.sender")
    action sender(bit<1> is_switch, bit<16> udp_port) {
        meta.from_switch = is_switch;
        meta.sender_ok = 1;
        meta.sender_port = udp_port;                      // 0: any port
        meta.sender_port_x = udp_port ^ hdr.udp.src_port;  // 0: the bound port (issue 33)
    }
    @name(".ingress.thc_validate.bad_sender")
    action bad_sender() {
        meta.sender_ok = 0;                   // the checks table drops it as BAD_SENDER
    }
    @name(".ingress.thc_validate.senders")
    table senders {
        key = {
            hdr.thc.job_id: exact @name("job_id");
            hdr.thc.rank: exact @name("rank");
            ig_intr_md.ingress_port: exact @name("ingress_port");
            hdr.ipv4.src_addr: exact @name("src_addr");
        }
        // sender(is_switch, udp_port): the binding names the UDP source port too (0: any);
        // the checks table compares it (issue 33)
        actions = { sender; @defaultonly bad_sender; }
        default_action = bad_sender();
        size = SENDERS_TABLE_SIZE;
    }

    // The THC header alone: message type -> kind, direction, cell offset of (kind, set) and
    // whether it is a partial from a child switch, for the consistent (type, lanes, payload,
    // slot_set, round parity) combinations; anything else -> the v1model program's drop
    // reason, in its order (SHORT, BAD_VERSION, BAD_TYPE, LANE_UNSUPPORTED, MALFORMED).
    action classify(bit<1> kind, bit<1> is_up, bit<1> partial, bit<16> ks_offset,
                    bit<16> max_elems_p1) {
        meta.kind = kind;
        meta.is_up = is_up;
        meta.partial = partial;
        meta.slot_ks = hdr.thc.slot + ks_offset;
        meta.elems_room = max_elems_p1 |-| hdr.thc.elem_count;   // 0: more than the payload holds
    }
    action header_drop(bit<8> reason) {
        meta.header_drop = reason;
    }
    table message_kinds {
        key = {
            ig_prsr_md.parser_err: ternary;
            hdr.thc.version: ternary;
            hdr.thc.msg_type: ternary;
            hdr.thc.lane_bits: ternary;
            hdr.seg_a.isValid(): ternary;
            hdr.thc.slot_set: ternary;
            hdr.thc.round[0:0]: ternary;
        }
        actions = { classify; header_drop; }
        default_action = header_drop(DROP_SHORT);   // the parser ran out of packet
        size = 32;
        const entries = {
#define V THC_VERSION
            (0, V, MSG_DATA, 8, true, 0, 0): classify(KIND_DATA, 1, 0, 0 * THC_SLOTS, THC_COORDS + 1);
            (0, V, MSG_DATA, 8, true, 1, 1): classify(KIND_DATA, 1, 0, 1 * THC_SLOTS, THC_COORDS + 1);
            (0, V, MSG_PARTIAL, 8, true, 0, 0): classify(KIND_DATA, 1, 1, 0 * THC_SLOTS, THC_COORDS + 1);
            (0, V, MSG_PARTIAL, 8, true, 1, 1): classify(KIND_DATA, 1, 1, 1 * THC_SLOTS, THC_COORDS + 1);
            (0, V, MSG_RESULT, 8, true, 0, 0): classify(KIND_DATA, 0, 0, 0 * THC_SLOTS, THC_COORDS + 1);
            (0, V, MSG_RESULT, 8, true, 1, 1): classify(KIND_DATA, 0, 0, 1 * THC_SLOTS, THC_COORDS + 1);
            (0, V, MSG_NORM, 32, true, 0, 0): classify(KIND_NORM, 1, 0, 2 * THC_SLOTS, THC_NORMS + 1);
            (0, V, MSG_NORM, 32, true, 1, 1): classify(KIND_NORM, 1, 0, 3 * THC_SLOTS, THC_NORMS + 1);
            (0, V, MSG_NORM_PARTIAL, 32, true, 0, 0): classify(KIND_NORM, 1, 1, 2 * THC_SLOTS, THC_NORMS + 1);
            (0, V, MSG_NORM_PARTIAL, 32, true, 1, 1): classify(KIND_NORM, 1, 1, 3 * THC_SLOTS, THC_NORMS + 1);
            (0, V, MSG_NORM_RESULT, 32, true, 0, 0): classify(KIND_NORM, 0, 0, 2 * THC_SLOTS, THC_NORMS + 1);
            (0, V, MSG_NORM_RESULT, 32, true, 1, 1): classify(KIND_NORM, 0, 0, 3 * THC_SLOTS, THC_NORMS + 1);
            // Indices need a per-lane lookup this target does not have.
            (0, V, MSG_DATA, THC_INDEX_BITS, _, _, _): header_drop(DROP_LANE_UNSUPPORTED);
            (0, V, MSG_DATA, _, _, _, _): header_drop(DROP_MALFORMED);
            (0, V, MSG_RESULT, _, _, _, _): header_drop(DROP_MALFORMED);
            (0, V, MSG_PARTIAL, _, _, _, _): header_drop(DROP_MALFORMED);
            (0, V, MSG_NORM, _, _, _, _): header_drop(DROP_MALFORMED);
            (0, V, MSG_NORM_RESULT, _, _, _, _): header_drop(DROP_MALFORMED);
            (0, V, MSG_NORM_PARTIAL, _, _, _, _): header_drop(DROP_MALFORMED);
            (0, V, _, _, _, _, _): header_drop(DROP_BAD_TYPE);
            (0, _, _, _, _, _, _): header_drop(DROP_BAD_VERSION);
#undef V
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

    // Everything the header and the three lookups said -> the first drop reason (v1model's
    // order, except that LANE_UNSUPPORTED for a job's lanes comes after the sender checks: a
    // ternary row can only test a value for 0, so "lanes are not 8 bits" is what is left).
    action drop(bit<8> reason) {
        meta.drop_reason = reason;
    }
    action header_reason() {
        meta.drop_reason = meta.header_drop;   // 0: all checks passed
    }
    table checks {
        key = {
            meta.header_drop: ternary;
            meta.job_ok: ternary;
            meta.elems_room: ternary;
            meta.is_up: ternary;
            meta.rank_over: ternary;
            meta.job.slot_room: ternary;
            meta.sender_ok: ternary;
            meta.partial: ternary;
            meta.from_switch: ternary;
            meta.job.has_parent: ternary;
            meta.kind: ternary;
            meta.job.lane_x: ternary;
            meta.job.parent_port_x: ternary;
            meta.job.parent_addr_x: ternary;
            meta.job.token_x: ternary;
            meta.sender_port: ternary;
            meta.sender_port_x: ternary;
        }
        actions = { drop; header_reason; }
        default_action = header_reason();
        size = 32;
        const entries = {
            // header, job, elems, up, rank_over, slots, sender, partial, switch, parent,
            // kind, lane_x, parent_port_x, parent_addr_x, token_x, sender_port, sender_port_x
            (0, 0, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): drop(DROP_UNKNOWN_JOB);
            (0, _, 0, _, _, _, _, _, _, _, _, _, _, _, _, _, _): drop(DROP_MALFORMED);
            (0, _, _, 1, 1, _, _, _, _, _, _, _, _, _, _, _, _): drop(DROP_MALFORMED);
            (0, _, _, _, _, 0, _, _, _, _, _, _, _, _, 0, _, _): drop(DROP_BAD_SLOT);
            (0, _, _, 1, _, _, 0, _, _, _, _, _, _, _, 0, _, _): drop(DROP_BAD_SENDER);
            (0, _, _, 1, _, _, _, 1, 0, _, _, _, _, _, 0, _, _): drop(DROP_BAD_SENDER);
            (0, _, _, 1, _, _, _, 0, 1, _, _, _, _, _, 0, _, _): drop(DROP_BAD_SENDER);
            (0, _, _, 0, _, _, _, _, _, 0, _, _, _, _, 0, _, _): drop(DROP_BAD_SENDER);
            // From here on only the sender's UDP port (a contribution: its binding names none,
            // or the datagram's source port is it), the lanes and the parent's port/address
            // are left to check.
            (0, _, _, 1, _, _, _, _, _, _, KIND_NORM, _, _, _, 0, 0, _): header_reason();
            (0, _, _, 1, _, _, _, _, _, _, KIND_NORM, _, _, _, 0, _, 0): header_reason();
            (0, _, _, 1, _, _, _, _, _, _, KIND_DATA, 0, _, _, 0, 0, _): header_reason();
            (0, _, _, 1, _, _, _, _, _, _, KIND_DATA, 0, _, _, 0, _, 0): header_reason();
            (0, _, _, 1, _, _, _, _, _, _, KIND_DATA, _, _, _, 0, 0, _): drop(DROP_LANE_UNSUPPORTED);
            (0, _, _, 1, _, _, _, _, _, _, KIND_DATA, _, _, _, 0, _, 0): drop(DROP_LANE_UNSUPPORTED);
            (0, _, _, 1, _, _, _, _, _, _, _, _, _, _, 0, _, _): drop(DROP_BAD_SENDER);
            (0, _, _, 0, _, _, _, _, _, _, KIND_NORM, _, 0, 0, 0, _, _): header_reason();
            (0, _, _, 0, _, _, _, _, _, _, KIND_DATA, 0, 0, 0, 0, _, _): header_reason();
            (0, _, _, 0, _, _, _, _, _, _, KIND_DATA, 0, _, _, 0, _, _): drop(DROP_BAD_SENDER);
            (0, _, _, 0, _, _, _, _, _, _, KIND_NORM, _, _, _, 0, _, _): drop(DROP_BAD_SENDER);
            (0, _, _, 0, _, _, _, _, _, _, KIND_DATA, _, _, _, 0, _, _): drop(DROP_LANE_UNSUPPORTED);
            // The job's token (issue 16): every row above but the header's own faults wants
            // token_x 0, so a wrong token ends here, after the same checks as v1model's.
            (0, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _): drop(DROP_BAD_SENDER);
        }
    }

    apply {
        jobs.apply();
        if (!hdr.recirc.isValid()) {
            // Pass 0 only: recirculated packets were checked here before.
            message_kinds.apply();
            contributor_bits.apply();
            senders.apply();
            checks.apply();
        } else if (meta.job_ok == 0) {
            meta.drop_reason = DROP_UNKNOWN_JOB;   // the job was removed between two passes
        }
    }
}

#endif
