"""The controller's side of ``ThcSlot`` (p4/v1model/include/control/thc_slot.p4): learning a rank
that stays dead from ``ingress.thc_slot.rank_contributions`` and not waiting for it.

Under the partial policy a dead rank costs every slot round a ``DEADLINE`` request (docs/
protocol.md, "Absent contributors"). The software target learns such a rank itself; BMv2 and
the TNA cannot (per-rank registers per job, and the TNA's stages are full). Their controller
can: the program counts every contribution it adds per job and rank (``rank_contributions``,
index = job index x ``MAX_WORKERS`` + rank), and a rank whose count stands still for
``dead_after`` seconds while another rank of the same job contributes is dead. The job's
``set_job`` entry at that switch is then re-installed with ``expected`` counting the live
ranks only (:attr:`control_plane.placement.JobAtSwitch.absent`), so every slot releases when the
live ranks are in, with no request (issue 33).

The rank keeps its ``senders`` entry and its place in the multicast group: when it comes back
its contributions are counted again, the watch sees its count move and re-installs the job
with it waited for. Until then (one poll) a slot may release at ``expected`` with the returning
rank in and a live one out: a partial sum like any other (count and bitmap say who is in).
Exact-policy jobs are never changed (a dead rank stalls them by design, and a sum without it is
not what they asked for).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from control_plane.controller import Controller
from host.protocol.layout import MAX_WORKERS

log = logging.getLogger(__name__)

#: per job index and rank: contributions added (v1model and the software target)
RANK_COUNTER = "ingress.thc_slot.rank_contributions"


@dataclass(frozen=True)
class RankChange:
    """A rank held absent (``absent`` true) or waited for again, at one switch."""

    switch: str
    job: str
    job_id: int
    rank: int
    absent: bool
    #: seconds its count had stood still (absent), or 0
    silent_s: float
    #: ``set_job.expected`` at the switch after the change
    expected: int

    def line(self) -> str:
        """One line for the operator."""
        if self.absent:
            return (f"{self.switch}: job {self.job} rank {self.rank} added nothing for "
                    f"{self.silent_s:.1f} s while the others did: not waited for "
                    f"(expected {self.expected})")
        return (f"{self.switch}: job {self.job} rank {self.rank} contributes again: waited for "
                f"(expected {self.expected})")

    def to_json(self) -> dict:
        return {"switch": self.switch, "job": self.job, "job_id": self.job_id, "rank": self.rank,
                "absent": self.absent, "silent_s": round(self.silent_s, 3),
                "expected": self.expected}


@dataclass
class DeadRankWatch:
    """Learns dead ranks of a controller's partial-policy jobs from the switches' per-rank
    counters (:meth:`poll`) and holds them absent in its placement (:meth:`Controller.set_absent`;
    the next ``apply`` writes it).

    Parameters
    ----------
    controller : Controller
        The controller whose placement is changed (its ``apply`` writes the change).
    dead_after : float
        Seconds a rank's count must stand still while another rank of its job contributes.
    """

    controller: Controller
    dead_after: float = 2.0
    #: (switch, job id, rank) -> (last count, when it last changed; time.monotonic)
    seen: dict[tuple[str, int, int], tuple[int, float]] = field(default_factory=dict)
    #: switches whose program has no per-rank counter (a build older than issue 33): nothing
    #: learned there
    unsupported: set[str] = field(default_factory=set)

    def watched(self) -> dict[str, list]:
        """switch -> its partial-policy jobs (``JobAtSwitch``) with two or more contributors."""
        out: dict[str, list] = {}
        for sw, jobs in self.controller.placement.per_switch.items():
            js = [j for j in jobs if j.job.policy == "partial" and len(j.contributors) > 1]
            if js:
                out[sw] = js
        return out

    def observe(self, switch: str, counts: dict[int, int], now: float | None = None) -> list[RankChange]:
        """Take one reading of ``switch``'s ``rank_contributions`` (index -> packets) and hold
        absent, or wait for again, the ranks it shows dead or back. Pure bookkeeping (no I/O)."""
        now = time.monotonic() if now is None else now
        changes: list[RankChange] = []
        for js in self.watched().get(switch, []):
            moved_at: dict[int, float] = {}
            moved_now: set[int] = set()
            for c in js.contributors:
                key = (switch, js.job.id, c.rank)
                v = counts.get(js.index * MAX_WORKERS + c.rank, 0)
                old = self.seen.get(key)
                if old is None or old[0] != v:
                    self.seen[key] = (v, now)
                    if old is not None:
                        moved_now.add(c.rank)
                moved_at[c.rank] = self.seen[key][1]
            absent = set(js.absent)
            back = absent & moved_now
            absent -= back
            dead = set()
            for c in js.contributors:
                since = moved_at[c.rank]
                if c.rank in absent or now - since < self.dead_after:
                    continue
                if any(moved_at[o.rank] > since for o in js.contributors if o.rank != c.rank):
                    dead.add(c.rank)
            # never all of them: somebody's contributions must complete a slot
            live = [c.rank for c in js.contributors if c.rank not in absent | dead]
            if not live:
                dead = set()
            if not dead and not back:
                continue
            absent |= dead
            self.controller.set_absent(switch, js.job.id, frozenset(absent))
            expected = sum(1 for c in js.contributors if c.rank not in absent)
            for r in sorted(dead):
                changes.append(RankChange(switch, js.job.name, js.job.id, r, True,
                                          now - moved_at[r], expected))
            for r in sorted(back):
                changes.append(RankChange(switch, js.job.name, js.job.id, r, False, 0.0,
                                          expected))
        for ch in changes:
            log.warning("%s", ch.line())
        return changes

    async def poll(self) -> list[RankChange]:
        """Read every watched switch's ``rank_contributions`` once and :meth:`observe` it; a
        switch that cannot be read is skipped this time (the reconcile round reports it)."""
        changes: list[RankChange] = []
        ctl = self.controller
        names = {c.preamble.name for c in ctl.p4info.counters}
        for sw_name in self.watched():
            if RANK_COUNTER not in names:
                if sw_name not in self.unsupported:
                    self.unsupported.add(sw_name)
                    log.warning("%s: the program has no %s: dead ranks are not learned there",
                                sw_name, RANK_COUNTER)
                continue
            sw = next(s for s in ctl.cfg.switches if s.name == sw_name)
            try:
                async with ctl.session(sw, write=False) as client:
                    counts = await ctl.read_counter(client, RANK_COUNTER)
            except Exception as exc:   # unreachable now; the apply round says so
                log.info("%s: per-rank counters not read: %s", sw_name, exc)
                continue
            changes += self.observe(sw_name, counts)
        return changes
