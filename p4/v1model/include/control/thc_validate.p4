// THC validation: header sanity, job lookup, sender binding. Sets meta.drop_reason on the
// first failed check; nothing here touches aggregation state, so a rejected packet has no
// side effect besides the drop counter.
// Tables (Python mirror: control_plane thc_validate module):
//   ingress.thc_validate.jobs     job_id -> set_job(..., token)
//   ingress.thc_validate.senders  (job_id, rank, ingress_port, src_addr)
//                                   -> sender(is_switch, udp_port)
// A sender binding names the UDP source port too (udp_port; 0: any port, for a sender whose
// port the controller does not know): a datagram of a member's address, rank and token from
// another port is dropped as BAD_SENDER (issue 33).
#ifndef NETCO_THC_VALIDATE_P4
#define NETCO_THC_VALIDATE_P4

control ThcValidate(inout headers_t hdr, inout local_metadata_t meta,
                    in standard_metadata_t std) {
    @name(".ingress.thc_validate.set_job")
    action set_job(bit<8> index, bit<16> slot_base, bit<16> num_slots, bit<8> expected,
                   bit<8> lane_bits, bit<16> mcast_grp, bit<1> has_parent, port_t parent_port,
                   ip4_t parent_addr, ip4_t self_addr, bit<8> self_id,
                   bit<32> token) {
        meta.job.index = index;
        meta.job.slot_base = slot_base;
        meta.job.num_slots = num_slots;
        meta.job.expected = expected;
        meta.job.lane_bits = lane_bits;
        meta.job.mcast_grp = mcast_grp;
        meta.job.has_parent = has_parent;
        meta.job.parent_port = parent_port;
        meta.job.parent_addr = parent_addr;
        meta.job.self_addr = self_addr;
        meta.job.self_id = self_id;
        meta.job.token = token;
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
    action sender(bit<1> is_switch, bit<16> udp_port) {
        meta.from_switch = is_switch;
        meta.sender_port = udp_port;
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
            std.ingress_port: exact @name("ingress_port");
            hdr.ipv4.src_addr: exact @name("src_addr");
        }
        actions = { sender; @defaultonly bad_sender; }
        default_action = bad_sender();
        size = SENDERS_TABLE_SIZE;
    }

    apply {
        bit<8> t = hdr.thc.msg_type;
        meta.is_up = (t == MSG_DATA || t == MSG_NORM || t == MSG_PARTIAL || t == MSG_NORM_PARTIAL)
                     ? 1w1 : 1w0;
        meta.kind = (t == MSG_NORM || t == MSG_NORM_RESULT || t == MSG_NORM_PARTIAL)
                    ? KIND_NORM : KIND_DATA;
        bit<16> limit = (meta.kind == KIND_NORM) ? (bit<16>)THC_NORMS : (bit<16>)THC_COORDS;
        if (!hdr.thc.isValid()) {
            meta.drop_reason = DROP_SHORT;
        } else if (hdr.thc.version != THC_VERSION) {
            meta.drop_reason = DROP_BAD_VERSION;
        } else if (t == 0 || t > MSG_NORM_PARTIAL) {
            meta.drop_reason = DROP_BAD_TYPE;
        } else if (!(hdr.indices.isValid() || hdr.lanes8.isValid() || hdr.lanes16.isValid()
                     || hdr.lanes32.isValid() || hdr.norms.isValid())) {
            meta.drop_reason = DROP_MALFORMED;   // undefined (msg_type, lane_bits) combination
        } else if (hdr.thc.slot_set > 1 || hdr.thc.slot_set != (bit<8>)hdr.thc.round[0:0]) {
            meta.drop_reason = DROP_MALFORMED;
        } else if (hdr.thc.elem_count > limit) {
            meta.drop_reason = DROP_MALFORMED;
        } else if (meta.is_up == 1 && hdr.thc.rank >= THC_MAX_WORKERS) {
            meta.drop_reason = DROP_MALFORMED;
        } else {
            jobs.apply();
        }
        if (meta.drop_reason == 0) {
            if (hdr.thc.token != meta.job.token) {
                meta.drop_reason = DROP_BAD_SENDER;   // not the job's token (issue 16)
            } else if (meta.kind == KIND_DATA && hdr.thc.msg_type != MSG_DATA
                    && hdr.thc.lane_bits != meta.job.lane_bits) {
                meta.drop_reason = DROP_MALFORMED;   // lanes of another width than the job's
            } else if (t == MSG_DATA && meta.job.lane_bits > MAX_DATA_RESULT_LANE_BITS) {
                meta.drop_reason = DROP_LANE_UNSUPPORTED;
            } else if (hdr.thc.slot >= meta.job.num_slots) {
                meta.drop_reason = DROP_BAD_SLOT;
            } else if (meta.is_up == 1) {
                senders.apply();
                if (meta.drop_reason == 0) {
                    bit<1> want_switch = (t == MSG_PARTIAL || t == MSG_NORM_PARTIAL) ? 1w1 : 1w0;
                    if (meta.from_switch != want_switch) {
                        meta.drop_reason = DROP_BAD_SENDER;
                    } else if (meta.sender_port != 0 && hdr.udp.src_port != meta.sender_port) {
                        meta.drop_reason = DROP_BAD_SENDER;   // not the bound UDP port
                    }
                }
            } else if (meta.job.has_parent == 0 || std.ingress_port != meta.job.parent_port
                       || hdr.ipv4.src_addr != meta.job.parent_addr) {
                meta.drop_reason = DROP_BAD_SENDER;   // results only come from our parent
            }
        }
    }
}

#endif
