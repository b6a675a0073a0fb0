// v1model headers struct and metadata. Wire header types: ../../shared/header.p4 and
// ../../shared/generated_protocol.p4.
#ifndef NETCO_HEADER_P4
#define NETCO_HEADER_P4

struct headers_t {
    ethernet_h ethernet;
    ipv4_h ipv4;
    udp_h udp;
    thc_h thc;
    thc_indices_h indices;
    thc_lanes8_h lanes8;
    thc_lanes16_h lanes16;
    thc_lanes32_h lanes32;
    thc_norms_h norms;
}

// Job parameters installed by the controller (thc_validate.jobs).
struct thc_job_t {
    bit<8>  index;        // 0..MAX_JOBS-1: counter index
    bit<16> slot_base;    // first slot of the job's range
    bit<16> num_slots;
    bit<8>  expected;     // contributors at this switch (workers + child switches)
    bit<8>  lane_bits;    // 8, 16 or 32
    bit<16> mcast_grp;    // members (workers, child switches) that receive results
    bit<1>  has_parent;   // 1: send the partial aggregate to a parent switch
    port_t  parent_port;
    ip4_t   parent_addr;
    ip4_t   self_addr;    // this switch's aggregation address (source of results)
    bit<8>  self_id;      // this switch's contributor id at the parent
    bit<32> token;        // per-job secret every THC header of the job carries
}

struct local_metadata_t {
    bit<8>  drop_reason;  // DROP_* (0: not dropped)
    bit<1>  is_thc;
    bit<1>  is_up;        // a contribution (DATA, NORM, PARTIAL, NORM_PARTIAL)
    bit<1>  kind;         // KIND_DATA or KIND_NORM
    bit<1>  from_switch;  // the validated sender is a child switch
    bit<16> sender_port;  // the UDP port its binding names (0: any; issue 33)
    thc_job_t job;
    bit<32> contrib_bit;      // this contributor's bit at this switch
    bit<8>  contrib_count;    // worker contributions this packet carries
    bit<32> contrib_workers;  // worker bitmap this packet carries
    bit<32> cell;             // ((slot_base + slot) * 2 + kind) * 2 + set
    bit<32> sum_base;         // cell * THC_COORDS
    bit<32> keep;             // 0: first contributor overwrites, ~0: add to stored sums
    bit<8>  acc_mode;         // ACC_*
    bit<8>  out_action;       // OUT_*
    bit<8>  out_flags;        // FLAG_* of the outgoing message
    bit<8>  out_count;
    bit<32> out_bitmap;
    thc_acc_t acc;
}

#endif
