// Rate limit of frames that fail validation (issue 33, 4; docs/security.md; constants from
// host/protocol/layout.py, RATE_LIMIT_*). A source (IPv4 address and UDP port) that sends more
// than RATE_LIMIT_FRAMES frames failing validation within RATE_LIMIT_WINDOW_US is held for
// RATE_LIMIT_HOLD_US: each of its frames is then dropped as RATE_LIMITED, its right guesses of
// a job's token included, so a guesser cannot confirm one at its send rate. A member's own
// socket never sends such frames.
// Applied after ThcValidate, which touches no state: overriding its verdict for a held source
// is the same as dropping the frame before validation. Sources share RATE_LIMIT_SOURCES hash
// slots; a slot remembers its source, so only that source is held, and a slot another source
// shares is taken over once its window and hold are over (the software target's C loop,
// host/softswitch/_swloop.c rl_note, does the same).
// Counter ingress.rate_limit.trips: times a source was held (the controller's watch reads it).
#ifndef NETCO_RATE_LIMIT_P4
#define NETCO_RATE_LIMIT_P4

control RateLimit(inout headers_t hdr, inout local_metadata_t meta,
                  in standard_metadata_t std) {
    register<bit<48>>(RATE_LIMIT_SOURCES) rl_source;   // address ++ UDP port; 0: free
    register<bit<48>>(RATE_LIMIT_SOURCES) rl_window;   // start of its window (us)
    register<bit<32>>(RATE_LIMIT_SOURCES) rl_count;    // frames failing validation in it
    register<bit<48>>(RATE_LIMIT_SOURCES) rl_until;    // held until (us)
    @name(".ingress.rate_limit.trips")
    counter(1, CounterType.packets) trips;

    apply {
        bit<48> key = hdr.ipv4.src_addr ++ hdr.udp.src_port;
        bit<32> i;
        hash(i, HashAlgorithm.crc32, 32w0, { hdr.ipv4.src_addr, hdr.udp.src_port },
             (bit<32>)RATE_LIMIT_SOURCES);
        bit<48> now = std.ingress_global_timestamp;
        bit<48> src;
        bit<48> until;
        rl_source.read(src, i);
        rl_until.read(until, i);
        if (until > now) {
            if (src == key) {
                meta.drop_reason = DROP_RATE_LIMITED;   // held: whatever validation said
            }
            // a slot another source holds: nothing counted
        } else if (meta.drop_reason != 0) {
            bit<48> window;
            bit<32> n;
            rl_window.read(window, i);
            rl_count.read(n, i);
            if (src != key || now - window >= RATE_LIMIT_WINDOW_US) {
                rl_source.write(i, key);
                rl_window.write(i, now);
                n = 0;
            }
            n = n + 1;
            rl_count.write(i, n);
            if (n == RATE_LIMIT_FRAMES + 1) {
                rl_until.write(i, now + RATE_LIMIT_HOLD_US);
                trips.count(0);
            }
        }
    }
}

#endif
