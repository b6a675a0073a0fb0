"""The program's P4Info names on every target.

A Tofino P4Info names each table, counter and register after the ``Pipeline`` instance
(``pipe.ingress.thc_validate.jobs``); the v1model P4Info, the software target and the whole
controller use the program's own names (``ingress.thc_validate.jobs``, the ``@name``
annotations of p4/v1model and p4/tna). :func:`program_view` maps the first onto the second.
"""

from __future__ import annotations

from finsy.proto import p4i

#: P4Info groups whose entities carry a pipeline prefix in a Tofino P4Info.
_PREFIXED_GROUPS = ("tables", "actions", "counters", "direct_counters", "meters", "direct_meters",
                    "registers", "digests", "action_profiles", "value_sets", "controller_packet_metadata")


def pipeline_prefix(info: p4i.P4Info) -> str:
    """The pipeline prefix of a Tofino P4Info's names (``"pipe."``), ``""`` for v1model.

    The Tofino compiler names every table, counter and register after the ``Pipeline``
    instance it belongs to (``pipe.ingress.thc_validate.jobs`` for the v1model program's
    ``ingress.thc_validate.jobs``); the prefix is read off the tables named ``<p>.ingress.*``
    or ``<p>.egress.*`` (our ``@name``s).
    """
    for t in info.tables:
        parts = t.preamble.name.split(".")
        if len(parts) > 2 and parts[1] in ("ingress", "egress"):
            return parts[0] + "."
    return ""


def program_view(info: p4i.P4Info) -> p4i.P4Info:
    """``info`` with the program's own names: the pipeline prefix dropped, ids unchanged.

    Aliases stay as the compiler wrote them: finsy decodes entities read back from a switch
    under their alias (``jobs``), and the view resolves those as well as the program's names.
    Encode and compare entities with the view; push the original P4Info to the switch (its
    toolchain knows the full names).
    """
    prefix = pipeline_prefix(info)
    if not prefix:
        return info
    view = p4i.P4Info()
    view.CopyFrom(info)
    for group in _PREFIXED_GROUPS:
        for ent in getattr(view, group, ()):
            name = ent.preamble.name
            if name.startswith(prefix):
                ent.preamble.name = name[len(prefix):]
    return view
