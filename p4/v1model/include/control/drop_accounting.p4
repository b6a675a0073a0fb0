// Drop accounting: every packet the ingress rejects is dropped here and counted by reason
// (counter ingress.drops, index = host.protocol.DropReason).
#ifndef NETCO_DROP_ACCOUNTING_P4
#define NETCO_DROP_ACCOUNTING_P4

control DropAccounting(inout local_metadata_t meta, inout standard_metadata_t std) {
    @name(".ingress.drops")
    counter(DROP_REASONS, CounterType.packets) drops;
    apply {
        if (meta.drop_reason != 0) {
            drops.count((bit<32>)meta.drop_reason);
            mark_to_drop(std);
        }
    }
}

#endif
