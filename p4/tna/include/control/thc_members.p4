// THC members (egress): each multicast copy of a result gets its member's addresses.
// Same table and P4Info names as the v1model program (egress.thc_members.members).
#ifndef NETCO_TNA_THC_MEMBERS_P4
#define NETCO_TNA_THC_MEMBERS_P4

control ThcMembers(inout headers_t hdr, in egress_intrinsic_metadata_t eg_intr_md) {
    @name(".egress.thc_members.set_member")
    action set_member(mac_t dst_mac, ip4_t dst_addr) {
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.dst_addr = dst_addr;
    }
    @name(".egress.thc_members.members")
    table members {
        key = {
            hdr.thc.job_id: exact @name("job_id");
            eg_intr_md.egress_port: exact @name("egress_port");
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
