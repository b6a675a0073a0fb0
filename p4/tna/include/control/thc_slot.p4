// THC slot state on Tofino: the v1model state machine (thc_slot.p4) split over passes 0 and 1
// so that every register is touched once per pass by one RegisterAction (pass 2 only adds
// the second half of the words).
//
// Pass 0 (from the wire; ThcDecide then picks what happens to the words):
//   round_reg   serial-number check of the packet's round against the cell's: SAME, FRESH
//               (newer: the round is opened and the cell reset) or STALE;
//   used_reg    whether the cell ever held a round: a never-used cell opens for any round;
//   state_reg   ST_COLLECTING when the round opens, otherwise the cell's state;
//   contrib_reg contributor bitmap at this switch; returns (old bitmap & this bit), so a
//               contribution already counted is never added twice.
// Pass 1 (after the first recirculation, beside the first half of the words):
//   remaining_reg countdown of missing contributors (expected - 1 at the first): 0 = complete;
//   count_reg / workers_reg worker contributions in the sum and their bitmap (from the
//               THC header's count/bitmap: pass 0 writes 1 and the worker's bit there);
//   state_reg   SENT_UP / FINAL on release, FINAL when the parent's result is stored;
//   round_reg   written with the round when pass 0 opened a never-used cell.
#ifndef NETCO_TNA_THC_SLOT_P4
#define NETCO_TNA_THC_SLOT_P4

const bit<8> V_STALE = 0;
const bit<8> V_SAME = 1;
const bit<8> V_FRESH = 2;

// What pass 1 does to the count registers (recirc.count_op, set by ThcDecide on pass 0).
const bit<8> CNT_NONE = 0;    // status request for a round the cell does not hold: count 0
const bit<8> CNT_PEEK = 1;    // status request: read count and workers
const bit<8> CNT_FIRST = 2;   // first contribution of a round: start the countdown
const bit<8> CNT_ADD = 3;     // a new contribution: count down, add count and workers
const bit<8> CNT_READ = 4;    // counted before (retransmission, deadline retry): read
const bit<8> CNT_STORE = 5;   // the parent's result: store its count and workers

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
        if (meta.pass == 1) {
            // Pass 1: release or store (meta.new_state from ThcSlotCount); the first round
            // of a never-used cell.
            if (meta.new_state != 0) {
                state_set.execute(meta.cell);
            }
            if (hdr.recirc.write_round == 1) {
                round_set.execute(meta.cell);
            }
        } else if (meta.pass == 0) {
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
    // per job and rank (index = job index * THC_MAX_WORKERS + rank): the controller's watch
    // learns a rank that stays dead from it (issue 33; docs/protocol.md, "Absent contributors").
    // A statistics ALU and its SRAM, no stateful ALU; the index is the job index and the rank's
    // five bits side by side (THC_MAX_WORKERS = 32; a rank above 31 was dropped in pass 0).
    @name(".ingress.thc_slot.rank_contributions")
    Counter<bit<32>, bit<16>>(MAX_JOBS * THC_MAX_WORKERS, CounterType_t.PACKETS)
        rank_contributions;

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
            value = hdr.thc.count;
            rv = hdr.thc.count;
        }
    };
    RegisterAction<bit<8>, bit<16>, bit<8>>(count_reg) count_add = {
        void apply(inout bit<8> value, out bit<8> rv) {
            value = value + hdr.thc.count;
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
            value = hdr.thc.bitmap;
            rv = hdr.thc.bitmap;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(workers_reg) workers_or = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = value | hdr.thc.bitmap;
            rv = value;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(workers_reg) workers_read = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };

    // After the registers: release, absorb, answer or resend up (v1model thc_slot.p4), as a
    // function of count_op, the countdown, the deadline flag, the parent and the cell's state.
    action set_out(bit<8> new_state, bit<8> out_action, bit<8> out_flags) {
        meta.new_state = new_state;
        meta.out_action = out_action;
        meta.out_flags = out_flags;
    }
    table completion {
        key = {
            hdr.recirc.count_op: ternary;
            meta.remaining: ternary;
            meta.deadline: ternary;
            meta.job.has_parent: ternary;
            hdr.recirc.state: ternary;
        }
        actions = { set_out; }
        default_action = set_out(0, OUT_NONE, 0);
        size = 32;
        const entries = {
            // count_op, remaining, deadline, has_parent, state
            (CNT_NONE, _, _, _, _): set_out(0, OUT_ANSWER, FLAG_PEEK);
            (CNT_PEEK, _, _, _, _): set_out(0, OUT_ANSWER, FLAG_PEEK);
            (CNT_STORE, _, _, _, _): set_out(ST_FINAL, OUT_MULTICAST, 0);
            // Counted now: complete (or the deadline) -> release, otherwise absorb.
            (CNT_FIRST, _, 1, 1, _): set_out(ST_SENT_UP, OUT_UP, FLAG_DEADLINE);
            (CNT_FIRST, 0, 0, 1, _): set_out(ST_SENT_UP, OUT_UP, 0);
            (CNT_FIRST, _, 1, 0, _): set_out(ST_FINAL, OUT_MULTICAST, 0);
            (CNT_FIRST, 0, 0, 0, _): set_out(ST_FINAL, OUT_MULTICAST, 0);
            (CNT_FIRST, _, _, _, _): set_out(0, OUT_ABSORB, 0);
            (CNT_ADD, _, 1, 1, _): set_out(ST_SENT_UP, OUT_UP, FLAG_DEADLINE);
            (CNT_ADD, 0, 0, 1, _): set_out(ST_SENT_UP, OUT_UP, 0);
            (CNT_ADD, _, 1, 0, _): set_out(ST_FINAL, OUT_MULTICAST, 0);
            (CNT_ADD, 0, 0, 0, _): set_out(ST_FINAL, OUT_MULTICAST, 0);
            (CNT_ADD, _, _, _, _): set_out(0, OUT_ABSORB, 0);
            // Counted before: the stored result, our partial again, or a deadline release.
            (CNT_READ, _, _, _, ST_FINAL): set_out(0, OUT_ANSWER, FLAG_RESENT);
            (CNT_READ, _, 1, _, ST_SENT_UP): set_out(0, OUT_UP, FLAG_RETX | FLAG_DEADLINE);
            (CNT_READ, _, 0, _, ST_SENT_UP): set_out(0, OUT_UP, FLAG_RETX);
            (CNT_READ, _, 1, 1, _): set_out(ST_SENT_UP, OUT_UP, FLAG_DEADLINE);
            (CNT_READ, _, 0, 1, _): set_out(ST_SENT_UP, OUT_UP, 0);
            (CNT_READ, _, _, 0, _): set_out(ST_FINAL, OUT_MULTICAST, 0);
        }
    }

    apply {
        if (meta.pass != 1) {
            return;
        }
        if (hdr.recirc.count_op == CNT_FIRST || hdr.recirc.count_op == CNT_ADD) {
            rank_contributions.count((bit<16>)(meta.job.index ++ hdr.thc.rank[4:0]));
        }
        if (hdr.recirc.count_op == CNT_FIRST) {
            contributions.count(meta.job.index);
            meta.remaining = remaining_start.execute(meta.cell);
            meta.out_count = count_first.execute(meta.cell);
            meta.out_bitmap = workers_first.execute(meta.cell);
        } else if (hdr.recirc.count_op == CNT_ADD) {
            contributions.count(meta.job.index);
            meta.remaining = remaining_count.execute(meta.cell);
            meta.out_count = count_add.execute(meta.cell);
            meta.out_bitmap = workers_or.execute(meta.cell);
        } else if (hdr.recirc.count_op == CNT_STORE) {
            meta.out_count = count_first.execute(meta.cell);
            meta.out_bitmap = workers_first.execute(meta.cell);
        } else if (hdr.recirc.count_op == CNT_READ || hdr.recirc.count_op == CNT_PEEK) {
            meta.out_count = count_read.execute(meta.cell);
            meta.out_bitmap = workers_read.execute(meta.cell);
        }
        completion.apply();
    }
}

#endif
