// Table sizes every netco P4 program shares (v1model and TNA), in one place. What a target
// sets for itself (its slot pool, registers, BMv2's headroom, Tofino's passes) stays in its
// own file: p4/v1model/include/size.p4, p4/tna/include/target.p4. p4/gen.py reads both
// (host/protocol/generated_dataplane.py), and tests/p4/test_p4_tna.py fails when a target
// file restates one of these.
#ifndef NETCO_SHARED_SIZE_P4
#define NETCO_SHARED_SIZE_P4

// Jobs the switch serves at once (thc_validate.jobs, thc_load.tables, per-job counters).
#define MAX_JOBS 16
// (job, rank, ingress port, source address) bindings of workers and child switches.
#define SENDERS_TABLE_SIZE 1024
// (job, egress port) -> member address for multicast results.
#define MEMBERS_TABLE_SIZE 1024
// IPv4 routes for ordinary traffic.
#define ROUTES_TABLE_SIZE 1024

#endif
