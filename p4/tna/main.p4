// netco: THC in-network aggregation for Tofino (P4_16, TNA; Tofino2 with t2na).
// Same wire protocol (docs/protocol.md, layouts generated from host/protocol/layout.py) and
// the same P4Info names as p4/v1model/main.p4 wherever the behaviour is the same, so one
// controller drives both. What differs, and why, is in p4/README.md ("Tofino").
// Build: make -C p4   (or: netco p4 build --target tofino)
#include <core.p4>
#if __TARGET_TOFINO__ == 2
#include <t2na.p4>
#else
#include <tna.p4>
#endif

#include "../shared/generated_protocol.p4"
#include "../shared/define.p4"
#include "../shared/header.p4"
#include "../shared/size.p4"
#include "include/target.p4"
#include "include/generated_words.p4"
#include "include/header.p4"
#include "include/parser.p4"
#include "include/control/routing.p4"
#include "include/control/thc_validate.p4"
#include "include/control/thc_slot.p4"
#include "include/control/thc_accumulate.p4"
#include "include/control/thc_decide.p4"
#include "include/control/thc_output.p4"
#include "include/control/thc_members.p4"
#include "include/control/drop_accounting.p4"
#include "include/control/generated_words_apply.p4"

control IngressImpl(inout headers_t hdr, inout ingress_metadata_t meta,
                    in ingress_intrinsic_metadata_t ig_intr_md,
                    in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                    inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Routing() routing;
    ThcValidate() thc_validate;
    ThcSlotCount() thc_slot_count;
    ThcSlotOpen() thc_slot_open;
    ThcDecide() thc_decide;
    ThcOutput() thc_output;
    DropAccounting() drop_accounting;
#include "include/control/generated_words_decl.p4"

    // A THC contribution takes three passes through this pipe (two for norms), two
    // recirculations apart (p4/README.md, "Tofino"): pass 0 validates and opens or joins the
    // slot's round, pass 1 counts the contribution and adds words 0..31, pass 2 adds words
    // 32..63 and sends the message on. The words depend on nothing but the parser, so their
    // tables share the stages of the validation and slot logic instead of following it.
    apply {
        if (hdr.thc.isValid()) {
            // Word processors (THC_WORDS_*, generated_words_apply.p4) are spread along the
            // chain; they read only what the parser set (meta.acc_mode is ACC_NONE on pass 0).
            THC_WORDS_TOP
            meta.is_thc = 1;
            meta.round = hdr.thc.round;
            meta.deadline = hdr.thc.flags[2:2];   // FLAG_DEADLINE (0x04)
            meta.peek = hdr.thc.flags[3:3];       // FLAG_PEEK (0x08)
            if (hdr.recirc.isValid()) {
                meta.cell = hdr.recirc.cell;
                meta.kind = KIND_DATA;
                if (hdr.thc.lane_bits == 32) {
                    meta.kind = KIND_NORM;
                }
                if (meta.pass == 2) {
                    meta.out_action = hdr.recirc.out_action;
                    meta.out_flags = hdr.recirc.out_flags;
                    meta.out_count = hdr.recirc.out_count;
                    meta.out_bitmap = hdr.recirc.out_bitmap;
                }
            }
            thc_validate.apply(hdr, meta, ig_intr_md, ig_prsr_md);
            THC_WORDS_AFTER_VALIDATE
            if (meta.pass == 0) {
                meta.cell = meta.slot_ks + meta.job.slot_base;
                if (meta.is_up == 1 && meta.from_switch == 0) {
                    // A worker's packet counts once, with its own bit; a child switch's
                    // partial carries its count and bitmap already (pass 1 adds them).
                    hdr.thc.count = 1;
                    hdr.thc.bitmap = meta.contrib_bit;
                }
            }
            if (meta.drop_reason == 0) {
                thc_slot_count.apply(hdr, meta);
                thc_slot_open.apply(hdr, meta);
                if (meta.pass == 0) {
                    thc_decide.apply(hdr, meta);
                }
            }
            THC_WORDS_AFTER_DECIDE
            if (meta.drop_reason == 0) {
                thc_output.apply(hdr, meta, ig_intr_md, ig_dprsr_md, ig_tm_md);
            }
            THC_WORDS_END
        } else if (hdr.udp.isValid() && hdr.udp.dst_port == THC_UDP_PORT) {
            meta.drop_reason = DROP_SHORT;   // THC port, but the THC header is cut short
        } else if (hdr.ipv4.isValid() && ig_prsr_md.parser_err == 0) {
            routing.apply(hdr, meta, ig_tm_md);
        } else {
            meta.drop_reason = DROP_NOT_IPV4;
        }
        drop_accounting.apply(meta, ig_dprsr_md);
    }
}

control EgressImpl(inout headers_t hdr, inout egress_metadata_t meta,
                   in egress_intrinsic_metadata_t eg_intr_md,
                   in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                   inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                   inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    ThcMembers() thc_members;
    apply {
        if (hdr.thc.isValid() && hdr.thc.rank == THC_RANK_ALL
                && (hdr.thc.msg_type == MSG_RESULT || hdr.thc.msg_type == MSG_NORM_RESULT)) {
            thc_members.apply(hdr, eg_intr_md);
        }
    }
}

Pipeline(ThcIngressParser(), IngressImpl(), ThcIngressDeparser(),
         ThcEgressParser(), EgressImpl(), ThcEgressDeparser()) pipe;

Switch(pipe) main;
