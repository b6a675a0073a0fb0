"""Pure mapping from a clustering to per-cluster in-network aggregation jobs.

With in-network aggregation (THC summed in a switch or software aggregator), every FIELDING
cluster is one aggregation job whose members send their updates to one tree. This module only
computes *what* should be installed: job descriptions for a clustering and the difference from
the previous clustering, so that a controller reinstalls only what changed after migration or
re-clustering (reconcile). It talks to no controller and has no side effects.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

ClientId = Hashable


@dataclass(frozen=True)
class AggregationJob:
    """One aggregation job: id, cluster it serves, sorted members."""

    job_id: str
    cluster_id: Hashable
    members: tuple

    def as_dict(self) -> dict:
        return {"job_id": self.job_id, "cluster_id": self.cluster_id,
                "members": list(self.members)}


@dataclass(frozen=True)
class JobChange:
    """Membership change of a job that exists before and after."""

    job_id: str
    joined: tuple
    left: tuple

    def as_dict(self) -> dict:
        return {"job_id": self.job_id, "joined": list(self.joined), "left": list(self.left)}


@dataclass
class JobDiff:
    """What a controller must do to go from the previous jobs to the new ones."""

    added: list[AggregationJob] = field(default_factory=list)
    removed: list[AggregationJob] = field(default_factory=list)
    changed: list[JobChange] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def as_dict(self) -> dict:
        return {
            "added": [j.as_dict() for j in self.added],
            "removed": [j.as_dict() for j in self.removed],
            "changed": [c.as_dict() for c in self.changed],
            "unchanged": list(self.unchanged),
        }


def _sorted(items) -> tuple:
    return tuple(sorted(items, key=lambda x: (type(x).__name__, x)))


def job_id(cluster_id: Hashable, prefix: str = "fielding") -> str:
    """Stable job id of a cluster (cluster ids are stable across migrations)."""
    return f"{prefix}-c{cluster_id}"


def jobs_for(
    clusters: Mapping[Hashable, Sequence[ClientId]], prefix: str = "fielding"
) -> dict[str, AggregationJob]:
    """One job per non-empty cluster; raises ValueError if a client is in two clusters."""
    seen: dict = {}
    out: dict[str, AggregationJob] = {}
    for cid, members in clusters.items():
        for m in members:
            if m in seen and seen[m] != cid:
                raise ValueError(
                    f"client {m!r} is in clusters {seen[m]!r} and {cid!r}: a client must "
                    "belong to exactly one cluster"
                )
            seen[m] = cid
        if members:
            jid = job_id(cid, prefix)
            out[jid] = AggregationJob(jid, cid, _sorted(set(members)))
    return out


def diff_jobs(
    previous: Mapping[Hashable, Sequence[ClientId]] | None,
    current: Mapping[Hashable, Sequence[ClientId]],
    prefix: str = "fielding",
) -> tuple[dict[str, AggregationJob], JobDiff]:
    """Jobs for ``current`` and the difference from ``previous`` (``None``: nothing installed).

    Returns
    -------
    jobs : dict
        ``job_id -> AggregationJob`` for ``current``.
    diff : JobDiff
        Jobs to add, remove, and membership changes (joined/left) of jobs kept.
    """
    new = jobs_for(current, prefix)
    old = jobs_for(previous or {}, prefix)
    diff = JobDiff()
    for jid in sorted(new.keys() - old.keys()):
        diff.added.append(new[jid])
    for jid in sorted(old.keys() - new.keys()):
        diff.removed.append(old[jid])
    for jid in sorted(new.keys() & old.keys()):
        a, b = set(old[jid].members), set(new[jid].members)
        if a == b:
            diff.unchanged.append(jid)
        else:
            diff.changed.append(JobChange(jid, _sorted(b - a), _sorted(a - b)))
    return new, diff
