// THC accumulate: the per-coordinate register pass over the cell's sums (THC step 9: integer
// addition only; norms: maximum of float32 bit patterns compared as unsigned integers, which
// orders non-negative IEEE-754 values correctly, THC step 3).
// BMv2 runs ingress in one thread, so the read-modify-write of a register is not interleaved.
#ifndef NETCO_THC_ACCUMULATE_P4
#define NETCO_THC_ACCUMULATE_P4

control ThcAccumulate(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".ingress.thc_accumulate.lane_sums")
    register<bit<32>>(THC_SUM_REGISTERS) lane_sums;

    apply {
        bit<32> s;
        if (meta.kind == KIND_DATA) {
            if (meta.acc_mode == ACC_ADD) {
#include "generated_acc_add.p4"
            } else if (meta.acc_mode == ACC_READ) {
#include "generated_acc_read_data.p4"
            } else if (meta.acc_mode == ACC_STORE) {
#include "generated_acc_store_data.p4"
            }
        } else {
            if (meta.acc_mode == ACC_ADD) {
#include "generated_acc_max.p4"
            } else if (meta.acc_mode == ACC_READ) {
#include "generated_acc_read_norms.p4"
            } else if (meta.acc_mode == ACC_STORE) {
#include "generated_acc_store_norms.p4"
            }
        }
    }
}

#endif
