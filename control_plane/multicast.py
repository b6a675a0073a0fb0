"""Multicast groups for result fan-out (packet replication engine, P4Runtime §9.5).

One group per job on every switch of its tree, id ``index + 1``: the ports of the job's
workers attached there and of its child switches. ``ThcOutput`` sets ``mcast_grp`` from the
job entry; ``ThcMembers`` rewrites each copy's addresses on egress.
"""

from __future__ import annotations

import finsy as fy

from control_plane.placement import JobAtSwitch
from control_plane.reconcile import OWNER_TAG


def group_entry(j: JobAtSwitch) -> fy.P4MulticastGroupEntry:
    """The multicast group of ``j`` at its switch (replicas sorted by port, instance 0)."""
    return fy.P4MulticastGroupEntry(j.mcast_grp, replicas=sorted({r.port for r in j.receivers}),
                                    metadata=OWNER_TAG)


def entries(j: JobAtSwitch) -> list[fy.P4MulticastGroupEntry]:
    """All multicast entities of ``j``."""
    return [group_entry(j)]
