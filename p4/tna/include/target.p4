// Per-target constants of the netco TNA program (Tofino, Tofino2): the one file to change
// when the program moves to another chip or port layout. p4/gen.py reads TNA_WORDS_PER_PASS
// and TNA_PASSES from here to generate the per-word processors.
#ifndef NETCO_TNA_TARGET_P4
#define NETCO_TNA_TARGET_P4

// Recirculation port of pipe 0: 68 on Tofino (pipe 0's internal recirculation port),
// 6 on Tofino2. Pass 0 of every THC contribution goes out here and comes back as pass 1.
#if __TARGET_TOFINO__ == 2
#define RECIRC_PORT 6
#else
#define RECIRC_PORT 68
#endif

// A 256-coordinate DATA packet carries table values in 8-bit lanes (docs/protocol.md, "Values
// uplink"): 256 bytes = 64 packed 32-bit words, four lanes per word. Each pass through the
// ingress adds TNA_WORDS_PER_PASS words (one stateful ALU per word, each register touched once
// per pass), so a packet takes TNA_PASSES passes (TNA_PASSES - 1 recirculations).
#define TNA_WORDS_PER_PASS 32
#define TNA_PASSES 2

// Jobs the switch serves at once (thc_validate.jobs, per-job counters).
#define MAX_JOBS 16
// Aggregation slots shared by all jobs (power of two). A cell is (slot, kind, set):
// cell = (kind * 2 + set) * THC_SLOTS + slot.
#define THC_SLOTS 1024
#define THC_SLOT_BITS 10
#define THC_CELLS 4096
// Word registers hold one pass of a cell each: index = cell + pass * THC_CELLS.
#define THC_WORD_REGISTERS 8192
// (job, rank, ingress port, source address) bindings of workers and child switches.
#define SENDERS_TABLE_SIZE 1024
// (job, egress port) -> member address for multicast results.
#define MEMBERS_TABLE_SIZE 1024
// IPv4 routes for ordinary traffic.
#define ROUTES_TABLE_SIZE 1024

#endif
