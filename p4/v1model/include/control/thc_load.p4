// THC load: turn the payload into one 32-bit addend per coordinate (meta.acc).
// DATA: each 4-bit index is mapped through the job's THC table (THC step 9: the switch adds
// table values L[q], integers 0..g). The controller keeps the table in
// ingress.thc_load.tables (job_id -> load_table(v0..v15)); the action copies the 16 values into
// a register scratch, which the generated per-coordinate code reads by nibble (a register read
// per coordinate is cheaper in BMv2 than a table lookup per coordinate).
// Lanes (PARTIAL, RESULT) and norms are copied as they are; values-uplink DATA (8-bit table
// values) only when every lane is at most the job's g, its table's largest value (issue 33, 5:
// a lane of 255 wrapped an 8-bit sum undetectably), else MALFORMED, as the software target
// (controls/thc_validate.py, _check_values). A job without a table entry has no bound (255).
#ifndef NETCO_THC_LOAD_P4
#define NETCO_THC_LOAD_P4

control ThcLoad(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".ingress.thc_load.table_scratch")
    register<bit<8>>(THC_TABLE_ENTRIES) table_scratch;

#include "generated_load_table_action.p4"

    @name(".ingress.thc_load.missing_table")
    action missing_table() {
        meta.drop_reason = DROP_UNKNOWN_JOB;
    }
    @name(".ingress.thc_load.tables")
    table tables {
        key = { hdr.thc.job_id: exact @name("job_id"); }
        actions = { load_table; @defaultonly missing_table; }
        default_action = missing_table();
        size = MAX_JOBS;
    }

    apply {
        bit<8> t;
        // values uplink: DATA of 8-bit table values (one application site of the table: BMv2)
        bool values = hdr.lanes8.isValid() && hdr.thc.msg_type == MSG_DATA;
        if (hdr.indices.isValid() || values) {
            bool hit = tables.apply().hit;
            if (values) {
                if (hit) {
                    bit<8> top = 0;
#include "generated_values_top.p4"
#include "generated_check_values.p4"
                } else {
                    meta.drop_reason = 0;     // no table: no bound, as the software target
                }
            }
        }
        if (meta.drop_reason == 0) {
            if (hdr.indices.isValid()) {
#include "generated_load_indices.p4"
            } else if (hdr.lanes8.isValid()) {
#include "generated_load_lanes8.p4"
            } else if (hdr.lanes16.isValid()) {
#include "generated_load_lanes16.p4"
            } else if (hdr.lanes32.isValid()) {
#include "generated_load_lanes32.p4"
            } else if (hdr.norms.isValid()) {
#include "generated_load_norms.p4"
            }
        }
    }
}

#endif
