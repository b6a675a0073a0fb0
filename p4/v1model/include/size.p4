// Table and register sizes of the netco v1model program; the ones both programs share are in
// p4/shared/size.p4 (included by main.p4 before this file).
#ifndef NETCO_SIZE_P4
#define NETCO_SIZE_P4

// Aggregation slots shared by all jobs; the controller gives each job a range
// [slot_base, slot_base + num_slots). Each slot has 2 copies (set bit) x 2 kinds (data, norm).
#define THC_SLOTS 256
#define THC_CELLS (THC_SLOTS * 4)
// One 32-bit register per coordinate per cell (norm cells use the first THC_NORMS).
#define THC_SUM_REGISTERS (THC_CELLS * THC_COORDS)
// Widest lanes a DATA packet may turn into: simple_switch gives a packet 512 bytes of
// headroom, so a result may be at most 512 bytes longer than the DATA it came from
// (256 x 16-bit lanes = 512 B replace 128 B of indices; 32-bit lanes would need 896 more).
#define MAX_DATA_RESULT_LANE_BITS 16

#endif
