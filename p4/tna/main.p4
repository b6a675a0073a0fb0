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

    apply {
        if (hdr.thc.isValid()) {
            meta.is_thc = 1;
            meta.round = hdr.thc.round;
            meta.deadline = hdr.thc.flags[2:2];   // FLAG_DEADLINE (0x04)
            meta.peek = hdr.thc.flags[3:3];       // FLAG_PEEK (0x08)
            if (hdr.recirc.isValid()) {
                meta.pass = 1;
                meta.cell = hdr.recirc.cell;
                meta.word_index = hdr.recirc.cell + THC_CELLS;
                meta.from_switch = hdr.recirc.from_switch[0:0];
                meta.kind = KIND_DATA;
                if (hdr.thc.msg_type == MSG_NORM || hdr.thc.msg_type == MSG_NORM_RESULT
                        || hdr.thc.msg_type == MSG_NORM_PARTIAL) {
                    meta.kind = KIND_NORM;
                }
                meta.is_up = 1;
                if (hdr.thc.msg_type == MSG_RESULT || hdr.thc.msg_type == MSG_NORM_RESULT) {
                    meta.is_up = 0;
                }
            }
            thc_validate.apply(hdr, meta, ig_intr_md, ig_prsr_md);
            if (meta.drop_reason == 0) {
                if (meta.pass == 0) {
                    meta.cell = meta.slot_ks + meta.job.slot_base;
                    meta.word_index = meta.slot_ks + meta.job.slot_base;
                }
                if (meta.from_switch == 1) {
                    meta.contrib_count = hdr.thc.count;
                    meta.contrib_workers = hdr.thc.bitmap;
                } else {
                    meta.contrib_count = 1;
                    meta.contrib_workers = meta.contrib_bit;
                }
                thc_slot_count.apply(hdr, meta);
                thc_slot_open.apply(hdr, meta);
#include "include/control/generated_words_apply.p4"
                thc_decide.apply(hdr, meta);
                if (meta.drop_reason == 0) {
                    thc_output.apply(hdr, meta, ig_intr_md, ig_dprsr_md, ig_tm_md);
                }
            }
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
