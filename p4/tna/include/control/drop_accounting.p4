// Drop accounting: every packet the ingress rejects is dropped here and counted by reason
// (counter ingress.drops, index = host.protocol.DropReason), as in the v1model program.
#ifndef NETCO_TNA_DROP_ACCOUNTING_P4
#define NETCO_TNA_DROP_ACCOUNTING_P4

control DropAccounting(in ingress_metadata_t meta,
                       inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    @name(".ingress.drops")
    Counter<bit<32>, bit<8>>(DROP_REASONS, CounterType_t.PACKETS) drops;
    apply {
        if (meta.drop_reason != 0) {
            drops.count(meta.drop_reason);
            ig_dprsr_md.drop_ctl = 1;
        }
    }
}

#endif
