"""Software aggregation target: the netco v1model program's semantics in Python/numpy.

Same wire protocol (``docs/protocol.md``), same controller interface (a P4Runtime server that
accepts the program's P4Info and entries), same drop counters — for machines without a Tofino
or BMv2. Run it with ``netco switch`` (or ``python -m host.softswitch``); see
``docs/softswitch.md``.

Modules: :mod:`~host.softswitch.pipeline` (data plane), :mod:`~host.softswitch.netio` (ports,
batched I/O), :mod:`~host.softswitch.server` (P4Runtime), :mod:`~host.softswitch.entities`
(entity store and validation), :mod:`~host.softswitch.config` (compiled tables),
:mod:`~host.softswitch.p4info` (P4Info), :mod:`~host.softswitch.switch` (the process),
:mod:`~host.softswitch.launch` (start one as a process and drive it over P4Runtime).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["SoftSwitch"]

if TYPE_CHECKING:  # pragma: no cover
    from host.softswitch.switch import SoftSwitch


def __getattr__(name: str) -> object:
    """``SoftSwitch`` on first use (PEP 562): the P4Runtime server's grpc/finsy load with the
    switch, not with ``netco switch --help`` or another submodule (issue 36)."""
    if name != "SoftSwitch":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from host.softswitch.switch import SoftSwitch

    globals()[name] = SoftSwitch
    return SoftSwitch
