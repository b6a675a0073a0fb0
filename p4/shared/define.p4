// Constants of the data plane that are not part of the wire protocol.
// (Wire constants come from generated_protocol.p4, generated from host/protocol/layout.py.)
#ifndef NETCO_DEFINE_P4
#define NETCO_DEFINE_P4

typedef bit<48> mac_t;
typedef bit<32> ip4_t;
typedef bit<9>  port_t;

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_UDP = 17;
const bit<16> IPV4_HEADER_BYTES = 20;
const bit<8>  RESULT_TTL = 64;

// Per-cell aggregation state (register thc_slot.state).
const bit<8> ST_EMPTY = 0;       // never used since the switch started
const bit<8> ST_COLLECTING = 1;  // round open, waiting for contributors
const bit<8> ST_SENT_UP = 2;     // complete here, partial sent to the parent, waiting for its result
const bit<8> ST_FINAL = 3;       // final result stored (answers retransmissions)

// What the ingress decided to do with a THC packet (meta.out_action).
const bit<8> OUT_NONE = 0;       // dropped (meta.drop_reason says why)
const bit<8> OUT_ABSORB = 1;     // contribution added, slot not complete: consume the packet
const bit<8> OUT_MULTICAST = 2;  // result to the job's multicast group
const bit<8> OUT_ANSWER = 3;     // stored result back to the sender of a retransmission
const bit<8> OUT_UP = 4;         // partial aggregate to the parent switch

// How the accumulate pass touches the registers (meta.acc_mode).
const bit<8> ACC_NONE = 0;
const bit<8> ACC_ADD = 1;        // data: sum += value; norms: max
const bit<8> ACC_READ = 2;       // read the stored values (retransmission answers, resend up)
const bit<8> ACC_STORE = 3;      // overwrite with the parent's final result

// ACC_MAX: norms take the maximum (TNA names it; v1model folds it into ACC_ADD by kind).
const bit<8> ACC_MAX = 4;

const bit<1> KIND_DATA = 0;
const bit<1> KIND_NORM = 1;

#endif
