// Ordinary IPv4 forwarding: longest-prefix match on the destination, L2 rewrite, TTL
// (same table and P4Info names as the v1model program's routing.p4).
#ifndef NETCO_TNA_ROUTING_P4
#define NETCO_TNA_ROUTING_P4

control Routing(inout headers_t hdr, inout ingress_metadata_t meta,
                inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    @name(".ingress.routing.route")
    action route(port_t port, mac_t src_mac, mac_t dst_mac) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ethernet.src_addr = src_mac;
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    @name(".ingress.routing.no_route")
    action no_route() {
        meta.drop_reason = DROP_NO_ROUTE;
    }
    @name(".ingress.routing.routes")
    table routes {
        key = { hdr.ipv4.dst_addr: lpm @name("dst_addr"); }
        actions = { route; @defaultonly no_route; }
        default_action = no_route();
        size = ROUTES_TABLE_SIZE;
    }
    apply {
        if (hdr.ipv4.ttl <= 1) {
            meta.drop_reason = DROP_TTL_EXPIRED;
        } else {
            routes.apply();
        }
    }
}

#endif
