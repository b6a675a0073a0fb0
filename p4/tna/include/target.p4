// Per-target constants of the netco TNA program (Tofino, Tofino2): the one file to change
// when the program moves to another chip or port layout. p4/gen.py reads TNA_WORDS_PER_PASS
// and TNA_PASSES from here to generate the per-word processors.
#ifndef NETCO_TNA_TARGET_P4
#define NETCO_TNA_TARGET_P4

// Recirculation port of pipe 0: 68 on Tofino (pipe 0's internal recirculation port),
// 6 on Tofino2. Every THC contribution goes out here after pass 0 (and after pass 1 for data)
// and comes back as the next pass.
#if __TARGET_TOFINO__ == 2
#define RECIRC_PORT 6
#else
#define RECIRC_PORT 68
#endif

// A 256-coordinate DATA packet carries table values in 8-bit lanes (docs/protocol.md, "Values
// uplink"): 256 bytes = 64 packed 32-bit words, four lanes per word. Pass 0 validates and
// opens/joins the slot; each later pass adds TNA_WORDS_PER_PASS words (one stateful ALU per
// word, each register touched once per pass): a data packet takes 1 + TNA_PASSES passes
// (TNA_PASSES recirculations), a norm packet (32 words) 2. p4/gen.py checks that the two
// word passes cover the payload (the parser's two segments).
#define TNA_WORDS_PER_PASS 32
#define TNA_PASSES 2
// Where the word processors sit in the ingress control flow (main.p4), by count. On Tofino a
// table cannot be placed in an earlier stage than one before it in the control flow, so the
// 32 processors are spread along the validation/slot chain to use the stateful ALUs the
// chain leaves free (4 per stage) instead of adding stages after it. Sum = TNA_WORDS_PER_PASS.
#define TNA_WORDS_TOP 4
#define TNA_WORDS_AFTER_VALIDATE 4
#define TNA_WORDS_AFTER_DECIDE 8
#define TNA_WORDS_END 16

// MAX_JOBS and the table sizes both programs share: p4/shared/size.p4.
// Aggregation slots shared by all jobs (power of two). A cell is (slot, kind, set):
// cell = (kind * 2 + set) * THC_SLOTS + slot.
#define THC_SLOTS 1024
#define THC_SLOT_BITS 10
#define THC_CELLS 4096
// Word registers hold one word pass of a cell each: index = cell + (pass - 1) * THC_CELLS.
#define THC_WORD_REGISTERS 8192

#endif
