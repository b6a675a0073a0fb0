// THC slot state on Tofino: the v1model state machine (thc_slot.p4) split over the two
// passes so that every register is touched once per pass by one RegisterAction.
//
// Pass 0 (before the words are added):
//   round_reg   serial-number check of the packet's round against the cell's: SAME, FRESH
//               (newer: the round is opened and the cell reset) or STALE;
//   used_reg    whether the cell ever held a round: a never-used cell opens for any round;
//   state_reg   ST_COLLECTING when the round opens, otherwise the cell's state;
//   contrib_reg contributor bitmap at this switch; returns (old bitmap & this bit), so a
//               contribution already counted is never added twice.
// Pass 1 (after the recirculation):
//   remaining_reg countdown of missing contributors (expected - 1 at the first): 0 = complete;
//   count_reg / workers_reg worker contributions in the sum and their bitmap;
//   state_reg   SENT_UP / FINAL on release, FINAL when the parent's result is stored;
//   round_reg   written with the round when pass 0 opened a never-used cell.
#ifndef NETCO_TNA_THC_SLOT_P4
#define NETCO_TNA_THC_SLOT_P4

const bit<8> V_STALE = 0;
const bit<8> V_SAME = 1;
const bit<8> V_FRESH = 2;

control ThcSlotOpen(inout headers_t hdr, inout ingress_metadata_t meta) {
    @name(".ingress.thc_slot.round_reg")
    Register<bit<32>, bit<16>>(THC_CELLS, 0) round_reg;
    @name(".ingress.thc_slot.used_reg")
    Register<bit<8>, bit<16>>(THC_CELLS, 0) used_reg;
    @name(".ingress.thc_slot.state_reg")
    Register<bit<8>, bit<16>>(THC_CELLS, 0) state_reg;
    @name(".ingress.thc_slot.contrib_reg")
    Register<bit<32>, bit<16>>(THC_CELLS, 0) contrib_reg;

    RegisterAction<bit<32>, bit<16>, bit<8>>(round_reg) round_open = {
        void apply(inout bit<32> value, out bit<8> rv) {
            if (value == meta.round) {
                rv = V_SAME;
            } else if ((int<32>)(meta.round - value) > 0) {
                value = meta.round;
                rv = V_FRESH;
            } else {
                rv = V_STALE;
            }
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<8>>(round_reg) round_peek = {
        void apply(inout bit<32> value, out bit<8> rv) {
            if (value == meta.round) {
                rv = V_SAME;
            } else {
                rv = V_STALE;
            }
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<8>>(round_reg) round_set = {
        void apply(inout bit<32> value) {
            value = meta.round;
        }
    };
    RegisterAction<bit<8>, bit<16>, bit<8>>(used_reg) use_cell = {
        void apply(inout bit<8> value, out bit<8> rv) {
            rv = value;
            value = 1;
        }
    };
    RegisterAction<bit<8>, bit<16>, bit<8>>(state_reg) state_open = {
        void apply(inout bit<8> value, out bit<8> rv) {
            value = ST_COLLECTING;
            rv = ST_COLLECTING;
        }
    };
    RegisterAction<bit<8>, bit<16>, bit<8>>(state_reg) state_read = {
        void apply(inout bit<8> value, out bit<8> rv) {
            rv = value;
        }
    };
    RegisterAction<bit<8>, bit<16>, bit<8>>(state_reg) state_set = {
        void apply(inout bit<8> value) {
            value = meta.new_state;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(contrib_reg) contrib_first = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = meta.contrib_bit;
            rv = 0;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(contrib_reg) contrib_join = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value & meta.contrib_bit;
            value = value | meta.contrib_bit;
        }
    };

    apply {
        if (hdr.recirc.isValid()) {
            // Pass 1: release or store (meta.new_state from ThcSlotCount); the first round
            // of a never-used cell.
            if (meta.new_state != 0) {
                state_set.execute(meta.cell);
            }
            if (hdr.recirc.write_round == 1) {
                round_set.execute(meta.cell);
            }
        } else {
            if (meta.is_up == 1 && meta.peek == 0) {
                meta.verdict = round_open.execute(meta.cell);
                meta.used = use_cell.execute(meta.cell);
            } else {
                meta.verdict = round_peek.execute(meta.cell);
                meta.used = 1;
            }
            // A cell that never held a round opens for any round (its register's 0 is no
            // round); pass 1 then writes the round into round_reg.
            if (meta.verdict == V_FRESH || meta.used == 0) {
                meta.state = state_open.execute(meta.cell);
                contrib_first.execute(meta.cell);
                meta.dup_bits = 0;
            } else if (meta.verdict == V_SAME) {
                meta.state = state_read.execute(meta.cell);
                if (meta.is_up == 1 && meta.peek == 0) {
                    meta.dup_bits = contrib_join.execute(meta.cell);
                }
            }
        }
    }
}

// Pass 1: who is in the sum, and is the slot complete?
control ThcSlotCount(inout headers_t hdr, inout ingress_metadata_t meta) {
    @name(".ingress.thc_slot.remaining_reg")
    Register<bit<8>, bit<16>>(THC_CELLS, 0) remaining_reg;
    @name(".ingress.thc_slot.count_reg")
    Register<bit<8>, bit<16>>(THC_CELLS, 0) count_reg;
    @name(".ingress.thc_slot.workers_reg")
    Register<bit<32>, bit<16>>(THC_CELLS, 0) workers_reg;
    @name(".ingress.thc_slot.contributions")
    Counter<bit<32>, bit<8>>(MAX_JOBS, CounterType_t.PACKETS) contributions;

    RegisterAction<bit<8>, bit<16>, bit<8>>(remaining_reg) remaining_start = {
        void apply(inout bit<8> value, out bit<8> rv) {
            value = meta.job.expected_m1;
            rv = meta.job.expected_m1;
        }
    };
    RegisterAction<bit<8>, bit<16>, bit<8>>(remaining_reg) remaining_count = {
        void apply(inout bit<8> value, out bit<8> rv) {
            value = value - 1;
            rv = value;
        }
    };
    RegisterAction<bit<8>, bit<16>, bit<8>>(count_reg) count_first = {
        void apply(inout bit<8> value, out bit<8> rv) {
            value = meta.contrib_count;
            rv = meta.contrib_count;
        }
    };
    RegisterAction<bit<8>, bit<16>, bit<8>>(count_reg) count_add = {
        void apply(inout bit<8> value, out bit<8> rv) {
            value = value + meta.contrib_count;
            rv = value;
        }
    };
    RegisterAction<bit<8>, bit<16>, bit<8>>(count_reg) count_read = {
        void apply(inout bit<8> value, out bit<8> rv) {
            rv = value;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(workers_reg) workers_first = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = meta.contrib_workers;
            rv = meta.contrib_workers;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(workers_reg) workers_or = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = value | meta.contrib_workers;
            rv = value;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(workers_reg) workers_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };

    apply {
        if (meta.pass == 0) {
            return;
        }
        bit<8> v = hdr.recirc.verdict;
        bit<8> st = hdr.recirc.state;
        bool counted = v == V_FRESH || (st == ST_COLLECTING && hdr.recirc.dup == 0);
        if (meta.is_up == 1 && meta.peek == 1) {
            // Status request: who is in this copy for this round? Changes no state.
            if (v == V_SAME) {
                meta.out_count = count_read.execute(meta.cell);
                meta.out_bitmap = workers_read.execute(meta.cell);
            } else {
                meta.out_count = 0;
                meta.out_bitmap = 0;
            }
            meta.out_action = OUT_ANSWER;
            meta.out_flags = FLAG_PEEK;
        } else if (meta.is_up == 0) {
            // The parent's result: store it (it answers later retransmissions), fan it out.
            meta.contrib_count = hdr.thc.count;
            meta.contrib_workers = hdr.thc.bitmap;
            meta.out_count = count_first.execute(meta.cell);
            meta.out_bitmap = workers_first.execute(meta.cell);
            meta.new_state = ST_FINAL;
            meta.out_action = OUT_MULTICAST;
            meta.out_flags = 0;
        } else {
            bool release = false;
            if (counted) {
                contributions.count(meta.job.index);
                if (v == V_FRESH) {
                    meta.remaining = remaining_start.execute(meta.cell);
                    meta.out_count = count_first.execute(meta.cell);
                    meta.out_bitmap = workers_first.execute(meta.cell);
                } else {
                    meta.remaining = remaining_count.execute(meta.cell);
                    meta.out_count = count_add.execute(meta.cell);
                    meta.out_bitmap = workers_or.execute(meta.cell);
                }
                if (meta.remaining == 0 || meta.deadline == 1) {
                    release = true;
                } else {
                    meta.out_action = OUT_ABSORB;
                }
            } else {
                meta.out_count = count_read.execute(meta.cell);
                meta.out_bitmap = workers_read.execute(meta.cell);
                if (st == ST_FINAL) {
                    meta.out_action = OUT_ANSWER;           // stored result (released earlier)
                    meta.out_flags = FLAG_RESENT;
                } else if (st == ST_SENT_UP) {
                    meta.out_action = OUT_UP;               // our partial again, to the parent
                    meta.out_flags = FLAG_RETX;
                    if (meta.deadline == 1) {
                        meta.out_flags = FLAG_RETX | FLAG_DEADLINE;
                    }
                } else {
                    release = true;                         // counted already, deadline
                }
            }
            if (release) {
                if (meta.job.has_parent == 1) {
                    meta.new_state = ST_SENT_UP;
                    meta.out_action = OUT_UP;
                    meta.out_flags = 0;
                    if (meta.deadline == 1) {
                        meta.out_flags = FLAG_DEADLINE;
                    }
                } else {
                    meta.new_state = ST_FINAL;
                    meta.out_action = OUT_MULTICAST;
                    meta.out_flags = 0;
                }
            }
        }
    }
}

#endif
