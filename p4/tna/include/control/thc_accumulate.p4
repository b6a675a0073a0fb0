// THC accumulate on Tofino: one processor per 32-bit word of a payload segment (THC step 9:
// integer addition only). A word packs four 8-bit lanes (big-endian, lane 4k in the high
// byte); adding words adds the lanes independently because no lane exceeds n*g <= 255, so
// the switch needs no per-lane lookup or carry handling. Norm words take the maximum of
// float32 bit patterns compared as unsigned integers (non-negative IEEE-754 values order
// like their bit patterns; THC step 3). Each processor owns one register array and touches
// it once per pass: on pass 1 at index = cell (words 0..31), on pass 2 at cell + THC_CELLS
// (words 32..63). TNA_WORDS_PER_PASS processors are instantiated by generated_words_*.p4
// (p4/gen.py). They read only the recirc header, so they need not wait for any other table.
#ifndef NETCO_TNA_THC_ACCUMULATE_P4
#define NETCO_TNA_THC_ACCUMULATE_P4

control ThcWord(inout bit<32> word, in bit<8> acc_mode, in bit<16> index) {
    Register<bit<32>, bit<16>>(THC_WORD_REGISTERS, 0) sums;

    RegisterAction<bit<32>, bit<16>, bit<32>>(sums) write_sum = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = word;
            rv = word;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(sums) add_sum = {
        void apply(inout bit<32> value, out bit<32> rv) {
            value = value + word;
            rv = value;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(sums) max_sum = {
        void apply(inout bit<32> value, out bit<32> rv) {
            if (word > value) {
                value = word;
            }
            rv = value;
        }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(sums) read_sum = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
        }
    };

    action word_write() { word = write_sum.execute(index); }
    action word_add() { word = add_sum.execute(index); }
    action word_max() { word = max_sum.execute(index); }
    action word_read() { word = read_sum.execute(index); }

    // The mode pass 0 decided (ThcDecide), carried in the recirc header.
    table mode {
        key = { acc_mode: exact; }
        actions = { word_write; word_add; word_max; word_read; NoAction; }
        default_action = NoAction();
        size = 4;
        const entries = {
            ACC_ADD: word_add();
            ACC_MAX: word_max();
            ACC_READ: word_read();
            ACC_STORE: word_write();
        }
    }

    apply {
        mode.apply();
    }
}

#endif
