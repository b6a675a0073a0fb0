// netco: THC in-network aggregation for BMv2 (P4_16, v1model).
// Wire format: docs/protocol.md (layouts generated from host/protocol/layout.py).
// Build: make -C p4   (or: netco p4 build)
#include <core.p4>
#include <v1model.p4>

#include "../shared/generated_protocol.p4"
#include "../shared/size.p4"
#include "include/size.p4"
#include "../shared/define.p4"
#include "../shared/header.p4"
#include "include/header.p4"
#include "include/parser.p4"
#include "include/control/checksum.p4"
#include "include/control/routing.p4"
#include "include/control/thc_validate.p4"
#include "include/control/rate_limit.p4"
#include "include/control/thc_load.p4"
#include "include/control/thc_slot.p4"
#include "include/control/thc_accumulate.p4"
#include "include/control/thc_emit.p4"
#include "include/control/thc_output.p4"
#include "include/control/thc_members.p4"
#include "include/control/drop_accounting.p4"

control IngressImpl(inout headers_t hdr, inout local_metadata_t meta,
                inout standard_metadata_t std) {
    Routing() routing;
    ThcValidate() thc_validate;
    RateLimit() rate_limit;
    ThcLoad() thc_load;
    ThcSlot() thc_slot;
    ThcAccumulate() thc_accumulate;
    ThcEmit() thc_emit;
    ThcOutput() thc_output;
    DropAccounting() drop_accounting;

    apply {
        if (hdr.udp.isValid() && hdr.udp.dst_port == THC_UDP_PORT) {
            meta.is_thc = 1;
            if (std.parser_error != error.NoError) {
                meta.drop_reason = DROP_SHORT;   // before any state is read or written
            } else {
                thc_validate.apply(hdr, meta, std);
            }
            rate_limit.apply(hdr, meta, std);   // a held source's frames: RATE_LIMITED
            if (meta.drop_reason == 0) {
                thc_load.apply(hdr, meta);
            }
            if (meta.drop_reason == 0) {
                thc_slot.apply(hdr, meta);
            }
            if (meta.drop_reason == 0) {
                thc_accumulate.apply(hdr, meta);
                if (meta.out_action != OUT_ABSORB) {
                    thc_emit.apply(hdr, meta);
                }
                thc_output.apply(hdr, meta, std);
            }
        } else if (hdr.ipv4.isValid() && std.parser_error == error.NoError) {
            routing.apply(hdr, meta, std);
        } else {
            meta.drop_reason = DROP_NOT_IPV4;
        }
        drop_accounting.apply(meta, std);
    }
}

control EgressImpl(inout headers_t hdr, inout local_metadata_t meta,
               inout standard_metadata_t std) {
    ThcMembers() thc_members;
    apply {
        if (hdr.thc.isValid() && meta.out_action == OUT_MULTICAST) {
            thc_members.apply(hdr, meta, std);
        }
    }
}

V1Switch(ThcParser(), VerifyChecksumImpl(), IngressImpl(), EgressImpl(), ComputeChecksumImpl(),
         ThcDeparser()) main;
