// THC members (egress): each multicast copy of a result gets its member's addresses.
// Table egress.thc_members.members: (job_id, egress_port) -> set_member(dst_mac, dst_addr).
#ifndef NETCO_THC_MEMBERS_P4
#define NETCO_THC_MEMBERS_P4

control ThcMembers(inout headers_t hdr, inout local_metadata_t meta,
                   inout standard_metadata_t std) {
    @name(".egress.thc_members.set_member")
    action set_member(mac_t dst_mac, ip4_t dst_addr) {
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.dst_addr = dst_addr;
    }
    @name(".egress.thc_members.members")
    table members {
        key = {
            hdr.thc.job_id: exact @name("job_id");
            std.egress_port: exact @name("egress_port");
        }
        actions = { set_member; @defaultonly NoAction; }
        default_action = NoAction();
        size = MEMBERS_TABLE_SIZE;
    }
    apply {
        members.apply();
    }
}

#endif
