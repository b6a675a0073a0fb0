// THC slot state machine: one cell per (slot, kind, set). SwitchML-style two copies per slot
// (set = round parity) keep the previous round's result while the next round aggregates, so a
// late retransmission can never mix rounds; the stored round number rejects older packets.
// Decides meta.acc_mode and meta.out_action; the accumulate/emit/output controls act on them.
// State lives in registers (BMv2 serves no register access over P4Runtime, see PI#376; hosts
// learn everything from result packets, operators from the counters).
#ifndef NETCO_THC_SLOT_P4
#define NETCO_THC_SLOT_P4

control ThcSlot(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".ingress.thc_slot.round_reg")
    register<bit<48>>(THC_CELLS) round_reg;     // round the cell holds (48-bit, ROUND_BITS)
    @name(".ingress.thc_slot.state_reg")
    register<bit<8>>(THC_CELLS) state_reg;      // ST_*, bit 7: opened from empty (see below)
    @name(".ingress.thc_slot.contrib_reg")
    register<bit<32>>(THC_CELLS) contrib_reg;   // contributor bitmap (dedup at this switch)
    @name(".ingress.thc_slot.ncontrib_reg")
    register<bit<8>>(THC_CELLS) ncontrib_reg;   // distinct contributors at this switch
    @name(".ingress.thc_slot.count_reg")
    register<bit<8>>(THC_CELLS) count_reg;      // worker contributions in the sum
    @name(".ingress.thc_slot.workers_reg")
    register<bit<32>>(THC_CELLS) workers_reg;   // worker bitmap of the sum

    @name(".ingress.thc_slot.contributions")
    counter(MAX_JOBS, CounterType.packets) contributions;
    // per job and rank (index = job index * THC_MAX_WORKERS + rank): the controller's watch
    // learns a rank that stays dead from it (issue 33; docs/protocol.md, "Absent contributors")
    @name(".ingress.thc_slot.rank_contributions")
    counter(MAX_JOBS * THC_MAX_WORKERS, CounterType.packets) rank_contributions;

    apply {
        bit<32> slot = (bit<32>)meta.job.slot_base + (bit<32>)hdr.thc.slot;
        meta.cell = (slot << 2) | ((bit<32>)meta.kind << 1) | (bit<32>)hdr.thc.slot_set[0:0];
        meta.sum_base = meta.cell * THC_COORDS;
        if (meta.from_switch == 1) {
            meta.contrib_count = hdr.thc.count;
            meta.contrib_workers = hdr.thc.bitmap;
        } else {
            meta.contrib_count = 1;
            meta.contrib_workers = (bit<32>)1 << hdr.thc.rank;
        }
        meta.contrib_bit = (bit<32>)1 << hdr.thc.rank;

        // rounds are 48-bit serial numbers: round_hi ++ round (docs/protocol.md, "Sessions")
        bit<48> pkt_round = hdr.thc.round_hi ++ hdr.thc.round;
        bit<48> rnd; bit<8> st; bit<32> cb; bit<8> nc; bit<8> cnt; bit<32> wb;
        round_reg.read(rnd, meta.cell);
        state_reg.read(st, meta.cell);
        // bit 7: the copy holds a round it was opened at from empty (a new job, a restart):
        // only then may its next round move it on before it released this one (issue 33)
        bit<8> tent = st & 0x80;
        st = st & 0x7f;
        contrib_reg.read(cb, meta.cell);
        ncontrib_reg.read(nc, meta.cell);
        count_reg.read(cnt, meta.cell);
        workers_reg.read(wb, meta.cell);

        bool peek = (hdr.thc.flags & FLAG_PEEK) != 0;
        bool deadline = (hdr.thc.flags & FLAG_DEADLINE) != 0;
        if (meta.is_up == 1 && peek) {
            // Status request: who is in this copy for this round? Changes no state.
            if (st == ST_EMPTY || rnd != pkt_round) {
                cnt = 0; wb = 0;
            }
            meta.acc_mode = ACC_NONE; meta.out_action = OUT_ANSWER; meta.out_flags = FLAG_PEEK;
        } else if (meta.is_up == 1) {
            bool fresh = false;
            if (st == ST_EMPTY) {
                fresh = true;
            } else if (rnd != pkt_round) {
                bit<48> ahead = pkt_round - rnd;       // serial-number comparison
                if (ahead[47:47] == 1) {
                    meta.drop_reason = DROP_STALE;
                } else if ((hdr.thc.flags & FLAG_START) == 0
                           && (ahead != 2 || (st != ST_FINAL && tent == 0))) {
                    // Without START a copy moves on only to its next round (two on), and
                    // only once released unless opened from empty: far ahead (issue 16, H2)
                    // or a member lapping the others (issue 33) is dropped, not obeyed
                    // (docs/protocol.md, "No lapping").
                    meta.drop_reason = DROP_AHEAD;
                } else {
                    fresh = true;
                }
            }
            if (meta.drop_reason == 0) {
                bool release = false;
                if (fresh) {
                    if (st == ST_EMPTY) {
                        tent = 0x80;
                    } else {
                        tent = 0;
                    }
                    rnd = pkt_round; st = ST_COLLECTING;
                    cb = 0; nc = 0; cnt = 0; wb = 0;
                    meta.keep = 0;            // first contributor overwrites the old sums
                } else {
                    meta.keep = 0xffffffff;
                }
                if ((cb & meta.contrib_bit) != 0) {
                    // Retransmission of a counted contribution: never counted twice.
                    if (st == ST_FINAL) {
                        meta.acc_mode = ACC_READ; meta.out_action = OUT_ANSWER;
                        meta.out_flags = FLAG_RESENT;
                    } else if (st == ST_SENT_UP) {
                        meta.acc_mode = ACC_READ; meta.out_action = OUT_UP;
                        meta.out_flags = FLAG_RETX | (hdr.thc.flags & (FLAG_DEADLINE | FLAG_START));
                    } else if (deadline) {
                        meta.acc_mode = ACC_READ; release = true;
                    } else {
                        meta.drop_reason = DROP_DUPLICATE;
                    }
                } else if (st == ST_FINAL) {
                    // Released early (deadline) without this contributor: send it the result.
                    meta.acc_mode = ACC_READ; meta.out_action = OUT_ANSWER;
                    meta.out_flags = FLAG_RESENT;
                } else if (st != ST_COLLECTING) {
                    meta.drop_reason = DROP_STALE;  // sent up without it; retry gets the result
                } else {
                    cb = cb | meta.contrib_bit;
                    nc = nc + 1;
                    cnt = cnt + meta.contrib_count;
                    wb = wb | meta.contrib_workers;
                    meta.acc_mode = ACC_ADD;
                    contributions.count((bit<32>)meta.job.index);
                    if (hdr.thc.rank < THC_MAX_WORKERS) {
                        rank_contributions.count((bit<32>)meta.job.index * THC_MAX_WORKERS
                                                 + (bit<32>)hdr.thc.rank);
                    }
                    if (nc >= meta.job.expected || deadline) {
                        release = true;
                    } else {
                        meta.out_action = OUT_ABSORB;
                    }
                }
                if (release) {
                    // Complete (or deadline): the root multicasts, a child sends up.
                    if (meta.job.has_parent == 1) {
                        st = ST_SENT_UP; meta.out_action = OUT_UP;
                        meta.out_flags = hdr.thc.flags & (FLAG_DEADLINE | FLAG_START);
                    } else {
                        st = ST_FINAL; meta.out_action = OUT_MULTICAST; meta.out_flags = 0;
                    }
                }
                round_reg.write(meta.cell, rnd);
                state_reg.write(meta.cell, st | tent);
                contrib_reg.write(meta.cell, cb);
                ncontrib_reg.write(meta.cell, nc);
                count_reg.write(meta.cell, cnt);
                workers_reg.write(meta.cell, wb);
            }
        } else {
            // A result from our parent: store it (it answers later retransmissions) and fan it
            // out to our members.
            if (rnd == pkt_round && (st == ST_SENT_UP || st == ST_FINAL)) {
                st = ST_FINAL;
                cnt = hdr.thc.count;
                wb = hdr.thc.bitmap;
                state_reg.write(meta.cell, st | tent);
                count_reg.write(meta.cell, cnt);
                workers_reg.write(meta.cell, wb);
                meta.acc_mode = ACC_STORE;
                meta.out_action = OUT_MULTICAST;
                meta.out_flags = 0;
            } else {
                meta.drop_reason = DROP_STALE;
            }
        }
        meta.out_count = cnt;
        meta.out_bitmap = wb;
    }
}

#endif
