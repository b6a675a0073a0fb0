// IPv4 header checksum: not verified on input (routing and aggregation do not depend on it),
// recomputed on output because routing decrements the TTL and results change lengths/addresses.
#ifndef NETCO_CHECKSUM_P4
#define NETCO_CHECKSUM_P4

control VerifyChecksumImpl(inout headers_t hdr, inout local_metadata_t meta) {
    apply { }
}

control ComputeChecksumImpl(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp_ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

#endif
