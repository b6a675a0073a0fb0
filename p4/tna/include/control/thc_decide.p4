// Pass 0's verdict on a THC packet that passed validation (the v1model thc_slot.p4 rules), in
// one table: drop it (STALE, DUPLICATE) or recirculate it with what passes 1 and 2 do to the
// words (acc_mode) and what pass 1 does to the count registers (count_op, CNT_* in
// thc_slot.p4), so that the later passes need no other table's result first.
#ifndef NETCO_TNA_THC_DECIDE_P4
#define NETCO_TNA_THC_DECIDE_P4

control ThcDecide(inout headers_t hdr, inout ingress_metadata_t meta) {
    action recirculate(bit<8> acc_mode, bit<8> count_op, bit<8> write_round) {
        hdr.recirc.setValid();
        hdr.recirc.pass = 1;
        hdr.recirc.count_op = count_op;
        hdr.recirc.state = meta.state;
        hdr.recirc.acc_mode = acc_mode;
        hdr.recirc.write_round = write_round;  // never-used cell opened: pass 1 writes the round
        hdr.recirc.out_action = OUT_NONE;
        hdr.recirc.out_flags = 0;
        hdr.recirc.out_count = 0;
        hdr.recirc.pad = 0;
        hdr.recirc.cell = meta.cell;
        hdr.recirc.word_index = meta.cell;
        hdr.recirc.out_bitmap = 0;
    }
    action stale() {
        meta.drop_reason = DROP_STALE;
    }
    action duplicate() {
        meta.drop_reason = DROP_DUPLICATE;
    }
    // Entries in priority order. dup_bits 0 rows come before the rows that take any value,
    // so those match a contributor already in the bitmap.
    table modes {
        key = {
            meta.verdict: ternary;
            meta.used: ternary;
            meta.state: ternary;
            meta.dup_bits: ternary;
            meta.deadline: ternary;
            meta.kind: ternary;
            meta.is_up: ternary;
            meta.peek: ternary;
        }
        actions = { recirculate; stale; duplicate; }
        default_action = stale();
        size = 16;
        const entries = {
            // verdict, used, state,    dup, deadline, kind,  is_up, peek
            // A status request changes nothing: pass 1 answers who is in the copy.
            (V_SAME,  _, _,             _, _, _,         1, 1): recirculate(ACC_NONE, CNT_PEEK, 0);
            (_,       _, _,             _, _, _,         1, 1): recirculate(ACC_NONE, CNT_NONE, 0);
            // Newer round, or a cell that never held one: the round opens with this packet.
            (V_FRESH, _, _,             _, _, _,         1, 0): recirculate(ACC_STORE, CNT_FIRST, 0);
            (_,       0, _,             _, _, _,         1, 0): recirculate(ACC_STORE, CNT_FIRST, 1);
            (V_SAME,  _, ST_COLLECTING, 0, _, KIND_DATA, 1, 0): recirculate(ACC_ADD, CNT_ADD, 0);
            (V_SAME,  _, ST_COLLECTING, 0, _, KIND_NORM, 1, 0): recirculate(ACC_MAX, CNT_ADD, 0);
            // Counted already: a deadline retry releases what is there, otherwise a duplicate.
            (V_SAME,  _, ST_COLLECTING, _, 1, _,         1, 0): recirculate(ACC_READ, CNT_READ, 0);
            (V_SAME,  _, ST_COLLECTING, _, _, _,         1, 0): duplicate();
            (V_SAME,  _, ST_FINAL,      _, _, _,         1, 0): recirculate(ACC_READ, CNT_READ, 0);
            // Sent up without this contributor: stale (a retry gets the parent's result).
            (V_SAME,  _, ST_SENT_UP,    0, _, _,         1, 0): stale();
            (V_SAME,  _, ST_SENT_UP,    _, _, _,         1, 0): recirculate(ACC_READ, CNT_READ, 0);
            // The parent's result for a copy we sent up (or already hold).
            (V_SAME,  _, ST_SENT_UP,    _, _, _,         0, _): recirculate(ACC_STORE, CNT_STORE, 0);
            (V_SAME,  _, ST_FINAL,      _, _, _,         0, _): recirculate(ACC_STORE, CNT_STORE, 0);
        }
    }

    apply {
        modes.apply();
    }
}

#endif
