"""Entries of the P4 control ``ThcValidate`` (p4/v1model/include/control/thc_validate.p4).

``ingress.thc_validate.jobs``: ``job_id → set_job(index, slot_base, num_slots, expected,
lane_bits, mcast_grp, has_parent, parent_port, parent_addr, self_addr, self_id, token)``;
``ingress.thc_validate.senders``: ``(job_id, rank, ingress_port, src_addr) →
sender(is_switch, udp_port)`` — one per direct contributor, binding its rank to the port and
address it sends from, and to the UDP source port when the job names one (``worker_port``;
0: any port) (docs/protocol.md, "Controller-installed state" and "Validation").

``token`` is the job's secret (one per job, the same at every switch of the job): drawn by
:func:`draw_token` when the controller first installs the job and kept afterwards (the
controller reads it back, :meth:`control_plane.controller.Controller.adopt_tokens`).
"""

from __future__ import annotations

import secrets

import finsy as fy

from control_plane.config import ConfigError
from control_plane.placement import JOBS_TABLE, SENDERS_TABLE, JobAtSwitch
from control_plane.reconcile import OWNER_TAG
from host.protocol.jobs import job_problems

SET_JOB = "ingress.thc_validate.set_job"
SENDER = "ingress.thc_validate.sender"


def draw_token() -> int:
    """A fresh job token: 32 random bits from :mod:`secrets` (never 0, the value of a header
    a sender did not fill in)."""
    while True:
        t = secrets.randbits(32)
        if t:
            return t


def job_entry(j: JobAtSwitch, token: int = 0) -> fy.P4TableEntry:
    """The ``jobs`` entry of ``j`` at its switch, with the job's ``token``.

    Raises
    ------
    ConfigError
        If the parameters break a rule the switch enforces (:func:`host.protocol.jobs.job_problems`,
        the same function the software target checks writes with).
    """
    problems = job_problems({"slot_base": j.slot_base, "num_slots": j.num_slots,
                             "expected": j.expected, "lane_bits": j.lane_bits})
    if problems:
        raise ConfigError([f"job {j.job.name} at switch {j.switch}: {f}: {m}" for f, m in problems])
    return fy.P4TableEntry(
        JOBS_TABLE,
        match=fy.P4TableMatch(job_id=j.job.id),
        action=fy.P4TableAction(
            SET_JOB,
            index=j.index, slot_base=j.slot_base, num_slots=j.num_slots, expected=j.expected,
            lane_bits=j.lane_bits, mcast_grp=j.mcast_grp, has_parent=int(j.parent is not None),
            parent_port=j.parent_port, parent_addr=j.parent_addr, self_addr=j.self_addr,
            self_id=j.self_id, token=token,
        ),
        metadata=OWNER_TAG,
    )


def sender_entries(j: JobAtSwitch) -> list[fy.P4TableEntry]:
    """One ``senders`` entry per direct contributor (worker: is_switch=0, child switch: 1;
    ``udp_port``: the job's ``worker_port`` for a worker, else 0, any port)."""
    return [
        fy.P4TableEntry(
            SENDERS_TABLE,
            match=fy.P4TableMatch(job_id=j.job.id, rank=c.rank, ingress_port=c.port, src_addr=c.ip),
            action=fy.P4TableAction(SENDER, is_switch=int(c.is_switch), udp_port=c.udp_port),
            metadata=OWNER_TAG,
        )
        for c in j.contributors
    ]


def entries(j: JobAtSwitch, token: int = 0) -> list[fy.P4TableEntry]:
    """All ``ThcValidate`` entries of ``j`` (its job's ``token`` in the jobs entry)."""
    return [job_entry(j, token), *sender_entries(j)]
