"""The software target's data plane, one module per control of ``p4/v1model/main.p4``.

=========================  ===========================================================
module                     P4 (``p4/v1model/include/``)
=========================  ===========================================================
:mod:`.parser`             ``parser.p4`` (where a packet is parsed)
:mod:`.thc_validate`       ``control/thc_validate.p4`` (+ ThcLoad's table check)
:mod:`.thc_load`           ``control/thc_load.p4`` (indices -> table values)
:mod:`.thc_slot`           ``control/thc_slot.p4`` (where a slot is reused)
:mod:`.thc_accumulate`     ``control/thc_accumulate.p4``
:mod:`.thc_output`         ``control/thc_emit.p4``, ``control/thc_output.p4``
:mod:`.thc_members`        ``control/thc_members.p4`` (egress)
:mod:`.routing`            ``control/routing.p4``
:mod:`.drop_accounting`    ``control/drop_accounting.p4``
:mod:`.checksum`           ``control/checksum.p4``
:mod:`.native`             the C fast path of the common case (``_fastpath.c``)
:mod:`.common`             shared constants, row views, counters, output buffer
=========================  ===========================================================

:class:`host.softswitch.pipeline.Pipeline` applies them in ``main.p4``'s order.
"""
