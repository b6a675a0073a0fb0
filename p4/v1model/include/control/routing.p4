// Ordinary IPv4 forwarding: longest-prefix match on the destination, L2 rewrite, TTL.
// The controller fills ingress.routing.routes (Python mirror: control_plane routing module).
#ifndef NETCO_ROUTING_P4
#define NETCO_ROUTING_P4

control Routing(inout headers_t hdr, inout local_metadata_t meta,
                inout standard_metadata_t std) {
    @name(".ingress.routing.route")
    action route(port_t port, mac_t src_mac, mac_t dst_mac) {
        std.egress_spec = port;
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
