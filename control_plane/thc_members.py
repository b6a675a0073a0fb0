"""Entries of the P4 control ``ThcMembers`` (p4/v1model/include/control/thc_members.p4).

``egress.thc_members.members``: ``(job_id, egress_port) → set_member(dst_mac, dst_addr)``:
each multicast copy of a result is addressed to the worker or child switch behind its port.
"""

from __future__ import annotations

import finsy as fy

from control_plane.placement import MEMBERS_TABLE, JobAtSwitch
from control_plane.reconcile import OWNER_TAG

SET_MEMBER = "egress.thc_members.set_member"


def entries(j: JobAtSwitch) -> list[fy.P4TableEntry]:
    """One ``members`` entry per result receiver of ``j`` at its switch."""
    return [
        fy.P4TableEntry(
            MEMBERS_TABLE,
            match=fy.P4TableMatch(job_id=j.job.id, egress_port=r.port),
            action=fy.P4TableAction(SET_MEMBER, dst_mac=r.mac, dst_addr=r.ip),
            metadata=OWNER_TAG,
        )
        for r in j.receivers
    ]
