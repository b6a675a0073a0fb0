"""Entries of the P4 control ``ThcLoad`` (p4/v1model/include/control/thc_load.p4).

``ingress.thc_load.tables``: ``job_id → load_table(v0..v15)``, the job's THC lookup table
(Li et al., NSDI 2024, step 9: the switch adds ``L[q]``, integers ``0..g``). The table is
the one every worker derives from the job's (b, g, p) (:mod:`host.thc.table`).
"""

from __future__ import annotations

import finsy as fy

from control_plane.placement import JobAtSwitch
from control_plane.reconcile import OWNER_TAG

TABLES_TABLE = "ingress.thc_load.tables"
LOAD_TABLE = "ingress.thc_load.load_table"


def table_entry(j: JobAtSwitch) -> fy.P4TableEntry:
    """The ``tables`` entry of ``j``: ``v{i}`` = table value of index i."""
    values = j.job.thc.table
    return fy.P4TableEntry(
        TABLES_TABLE,
        match=fy.P4TableMatch(job_id=j.job.id),
        action=fy.P4TableAction(LOAD_TABLE, **{f"v{i}": int(v) for i, v in enumerate(values)}),
        metadata=OWNER_TAG,
    )


def entries(j: JobAtSwitch) -> list[fy.P4TableEntry]:
    """All ``ThcLoad`` entries of ``j``."""
    return [table_entry(j)]
