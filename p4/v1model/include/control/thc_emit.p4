// THC emit: write the accumulators into the outgoing payload, lanes of the job's width
// (THC step 10: integer lane sums in network byte order) or the norms payload.
#ifndef NETCO_THC_EMIT_P4
#define NETCO_THC_EMIT_P4

control ThcEmit(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        if (meta.kind == KIND_NORM) {
#include "generated_emit_norms.p4"
        } else {
            hdr.indices.setInvalid();
            hdr.lanes8.setInvalid();
            hdr.lanes16.setInvalid();
            hdr.lanes32.setInvalid();
            if (meta.job.lane_bits == 8) {
                hdr.lanes8.setValid();
#include "generated_emit_lanes8.p4"
            } else if (meta.job.lane_bits == 16) {
                hdr.lanes16.setValid();
#include "generated_emit_lanes16.p4"
            } else {
                hdr.lanes32.setValid();
#include "generated_emit_lanes32.p4"
            }
        }
    }
}

#endif
