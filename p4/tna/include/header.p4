// TNA headers struct and metadata. Wire header types: ../../shared/header.p4 and
// ../../shared/generated_protocol.p4; the 32-word payload segment comes from
// generated_words.p4 (p4/gen.py).
#ifndef NETCO_TNA_HEADER_P4
#define NETCO_TNA_HEADER_P4

// Between the passes of a THC contribution (never on a wire): what the earlier passes
// decided. Emitted in front of Ethernet towards RECIRC_PORT, parsed when the packet comes back.
header recirc_h {
    bit<8>  pass;        // the pass the packet is coming back for: 1 or 2
    bit<8>  count_op;    // CNT_*: what pass 1 does to the count registers (ThcDecide)
    bit<8>  state;       // ST_* of the cell as pass 0 saw it (after opening a fresh round)
    bit<8>  acc_mode;    // ACC_* for the words of passes 1 and 2
    bit<8>  write_round; // 1: pass 0 opened a never-used cell; pass 1 writes its round
    bit<8>  out_action;  // OUT_* decided on pass 1, carried to pass 2 (data)
    bit<8>  out_flags;
    bit<8>  out_count;
    bit<7>  pad;
    PortId_t in_port;    // where the packet entered (answers go back there)
    bit<16> cell;        // (kind * 2 + set) * THC_SLOTS + slot
    bit<16> word_index;  // word register index of this pass: cell + (pass - 1) * THC_CELLS
    bit<32> out_bitmap;
}

struct headers_t {
    recirc_h recirc;
    ethernet_h ethernet;
    ipv4_h ipv4;
    udp_h udp;
    thc_h thc;
    // The payload in 32-word segments. The deparser emits seg_b before seg_a. Pass 0 (from
    // the wire) parses the first half into seg_b, so the payload leaves it unchanged; passes
    // 1 and 2 parse it into seg_a first, so each recirculation rotates it: pass 1 adds words
    // 0..31 and pass 2 words 32..63, both in seg_a, and after pass 2 the order is restored.
    thc_words_h seg_a;
    thc_words_h seg_b;
}

struct thc_job_t {
    bit<8>  index;
    bit<16> slot_base;
    bit<16> slot_room;    // num_slots - slot (saturating): 0 = slot out of the job's range
    bit<8>  expected;
    bit<8>  expected_m1;  // expected - 1: the countdown a fresh round starts from
    bit<8>  lane_bits;
    bit<8>  lane_x;       // lane_bits ^ 8: 0 = packed 8-bit lanes
    bit<16> mcast_grp;
    bit<1>  has_parent;
    PortId_t parent_port_x;  // parent_port ^ ingress_port: 0 = from the parent's port
    ip4_t   parent_addr_x;   // parent_addr ^ src_addr: 0 = from the parent's address
    PortId_t parent_port;
    ip4_t   parent_addr;
    ip4_t   self_addr;
    bit<8>  self_id;
    bit<32> token_x;      // token ^ hdr.thc.token: 0 = the job's token (issue 16)
}

// Zero-initialised (Tofino does not clear metadata unless asked to).
@pa_auto_init_metadata
struct ingress_metadata_t {
    bit<8>  drop_reason;
    bit<8>  header_drop;      // the THC header's own fault (message_kinds), 0 = none
    bit<1>  job_ok;           // jobs hit
    bit<1>  sender_ok;        // senders hit
    bit<1>  partial;          // PARTIAL / NORM_PARTIAL (from a child switch)
    bit<1>  is_thc;
    bit<1>  is_up;
    bit<1>  kind;
    bit<1>  peek;
    bit<1>  deadline;
    bit<1>  from_switch;
    bit<16> sender_port;      // the UDP port the sender's binding names (0: any; issue 33)
    bit<16> sender_port_x;    // sender_port ^ hdr.udp.src_port: 0 = the bound port
    thc_job_t job;
    bit<16> slot_ks;          // slot + (kind * 2 + set) * THC_SLOTS
    bit<16> elems_room;       // (payload elements + 1) - elem_count, saturating: 0 = too many
    bit<1>  rank_over;        // rank >= THC_MAX_WORKERS
    bit<16> cell;
    // Set by the parser from the recirc header (0 from the wire), so that the word
    // processors need no table before them and may sit anywhere in the control flow.
    bit<8>  pass;             // 0 from the wire, 1 and 2 after recirculations
    bit<8>  acc_mode;         // ACC_* for the words (ThcDecide on pass 0); ACC_NONE on pass 0
    bit<16> word_index;       // word register index of this pass
    bit<32> round;
    bit<32> contrib_bit;      // 1 << rank
    bit<8>  verdict;
    bit<8>  used;             // 0: the cell never held a round (pass 0)
    bit<8>  state;
    bit<32> dup_bits;         // contributor bitmap AND this contributor's bit (pass 0)
    bit<8>  remaining;        // contributors still missing after this one (pass 1)
    bit<8>  new_state;
    bit<8>  out_action;
    bit<8>  out_flags;
    bit<8>  out_count;
    bit<32> out_bitmap;
    bit<1>  count_result;     // ingress.thc_output.results
    bit<1>  count_resent;     // ingress.thc_output.resent
}

struct egress_metadata_t {
}

#endif
