// Pass 0's verdict on a THC packet that passed validation (the v1model thc_slot.p4 rules):
// drop it (STALE, DUPLICATE) or recirculate it with what pass 1 must do to the second half
// of the words (meta.acc_mode). The words of pass 0 are handled by ThcWord's own table with
// the same rules (word_modes.p4), so that they need not wait for this control.
#ifndef NETCO_TNA_THC_DECIDE_P4
#define NETCO_TNA_THC_DECIDE_P4

control ThcDecide(inout headers_t hdr, inout ingress_metadata_t meta) {
    apply {
        if (meta.pass == 1) {
            return;
        }
        bool fresh = meta.verdict == V_FRESH || meta.used == 0;
        bit<8> st = meta.state;
        // Pass 1 only touches words of data packets (norms fit one segment).
        bit<8> data_add = ACC_NONE;
        bit<8> data_read = ACC_NONE;
        bit<8> data_store = ACC_NONE;
        if (meta.kind == KIND_DATA) {
            data_add = ACC_ADD;
            data_read = ACC_READ;
            data_store = ACC_STORE;
        }
        meta.acc_mode = ACC_NONE;
        if (meta.is_up == 1 && meta.peek == 1) {
            meta.acc_mode = ACC_NONE;            // status request: answered on pass 1
        } else if (!fresh && meta.verdict != V_SAME) {
            meta.drop_reason = DROP_STALE;
        } else if (meta.is_up == 1) {
            if (fresh) {
                meta.acc_mode = data_store;
            } else if (st == ST_COLLECTING) {
                if (meta.dup_bits == 0) {
                    meta.acc_mode = data_add;
                } else if (meta.deadline == 1) {
                    meta.acc_mode = data_read;
                } else {
                    meta.drop_reason = DROP_DUPLICATE;
                }
            } else if (st == ST_FINAL) {
                meta.acc_mode = data_read;
            } else if (st == ST_SENT_UP && meta.dup_bits != 0) {
                meta.acc_mode = data_read;
            } else {
                meta.drop_reason = DROP_STALE;   // sent up without it; a retry gets the result
            }
        } else if (st == ST_SENT_UP || st == ST_FINAL) {
            meta.acc_mode = data_store;          // the parent's result
        } else {
            meta.drop_reason = DROP_STALE;
        }
        if (meta.drop_reason == 0) {
            hdr.recirc.setValid();
            hdr.recirc.pass = 1;
            hdr.recirc.verdict = meta.verdict;   // PEEK may be STALE
            if (fresh) {
                hdr.recirc.verdict = V_FRESH;
            }
            hdr.recirc.state = st;
            hdr.recirc.acc_mode = meta.acc_mode;
            hdr.recirc.dup = 0;
            if (meta.dup_bits != 0) {
                hdr.recirc.dup = 1;
            }
            hdr.recirc.from_switch = (bit<8>)meta.from_switch;
            hdr.recirc.write_round = 0;
            if (meta.used == 0 && meta.verdict == V_STALE) {
                hdr.recirc.write_round = 1;
            }
            hdr.recirc.pad = 0;
            hdr.recirc.cell = meta.cell;
        }
    }
}

#endif
