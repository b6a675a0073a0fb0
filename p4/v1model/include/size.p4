// All table and register sizes of the netco v1model program, in one place.
#ifndef NETCO_SIZE_P4
#define NETCO_SIZE_P4

// Jobs the switch serves at once (thc_validate.jobs, thc_load.tables, per-job counters).
#define MAX_JOBS 16
// Aggregation slots shared by all jobs; the controller gives each job a range
// [slot_base, slot_base + num_slots). Each slot has 2 copies (set bit) x 2 kinds (data, norm).
#define THC_SLOTS 256
#define THC_CELLS (THC_SLOTS * 4)
// One 32-bit register per coordinate per cell (norm cells use the first THC_NORMS).
#define THC_SUM_REGISTERS (THC_CELLS * THC_COORDS)
// (job, rank, ingress port, source address) bindings of workers and child switches.
#define SENDERS_TABLE_SIZE 1024
// (job, egress port) -> member address for multicast results.
#define MEMBERS_TABLE_SIZE 1024
// Widest lanes a DATA packet may turn into: simple_switch gives a packet 512 bytes of
// headroom, so a result may be at most 512 bytes longer than the DATA it came from
// (256 x 16-bit lanes = 512 B replace 128 B of indices; 32-bit lanes would need 896 more).
#define MAX_DATA_RESULT_LANE_BITS 16
// IPv4 routes for ordinary traffic.
#define ROUTES_TABLE_SIZE 1024

#endif
