"""FIELDING clusters as in-network THC aggregation jobs, installed by the P4Runtime controller.

With in-network aggregation every FIELDING cluster (Li et al., "Fielding: Clustered Federated
Learning with Data Drift", AISTATS 2026) is one THC aggregation job (Li et al., NSDI 2024) with
its own tree: its members' compressed updates are summed by the switches and only by them, so
two clusters never mix. This module

* turns a base network (switches, hosts, links: the controller file of
  ``docs/controller.md`` without ``jobs``) and a cluster membership into the controller file
  with one job per non-empty cluster (:func:`plan_network`, pure), and
* keeps a :class:`~control_plane.controller.Controller` in step with the membership
  (:class:`ClusterNetwork`): after a migration or a re-clustering it rebuilds the file and
  reconciles, so only the entries that differ are written.

Stability across re-clusterings (so that a small change touches few entries):

* job ``id`` = ``job_id_base + cluster id`` and job name ``fielding-c<cluster id>``
  (:func:`control_plane.fielding.jobs.job_id`); FIELDING reuses a cluster's id for the new
  cluster that shares most of its members, so a migration keeps both ids;
* members are sorted (:func:`control_plane.fielding.jobs.jobs_for`); a member's **rank is its
  position**, so ranks of a job whose membership changed may change (workers must take them
  from the new plan, and start a new session: :attr:`ClusterJob.worker_spec` ``round_base``);
* every job gets an explicit ``slot_base``: a surviving cluster keeps its slot range, a new one
  takes the first free range, so the slot ranges of untouched jobs never move.

What the controller decides and this module cannot: the job *index* (counter index and
multicast group id) is the job's position in id order (``control_plane/placement.py``), so
when a cluster disappears every job with a larger id gets a new index, and its job entry and
multicast group are rewritten although its members did not change.
:attr:`NetworkUpdate.touched_jobs` reports every job whose entries changed, for whatever reason.
"""

from __future__ import annotations

import asyncio
import logging
import operator
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from control_plane import multicast, routing, thc_load, thc_members, thc_validate
from control_plane.config import DEFAULT_NUM_SLOTS, NetworkConfig, parse_config
from control_plane.controller import (
    JOB_COUNTERS,
    Controller,
    ControllerError,
    NotPrimaryError,
    SwitchResult,
)
from control_plane.fielding.jobs import JobDiff, diff_jobs, jobs_for
from control_plane.placement import DEFAULT_SLOT_POOL, limits_from_p4info, place
from control_plane.reconcile import diff, normalise
from host.protocol.layout import MAX_WORKERS

log = logging.getLogger(__name__)

#: Job id of cluster 0 (job id = base + cluster id).
DEFAULT_JOB_ID_BASE = 100
#: Largest job id (16-bit ``job_id`` of the THC header, docs/protocol.md).
MAX_JOB_ID = 0xFFFF
CONTRIBUTIONS = JOB_COUNTERS[0]


@dataclass(frozen=True)
class ClusterJob:
    """The aggregation job of one cluster, as installed.

    Attributes
    ----------
    cluster_id : int
    name : str
        Job name in the controller file (``fielding-c<cluster id>``).
    id : int
        ``job_id`` of its packets.
    clients : tuple
        Client ids in rank order (rank = position).
    hosts : tuple of str
        The clients' host names, same order.
    slot_base, num_slots : int
        The job's slot range at every switch of its tree.
    granularity : int
        THC g of the job (the workers' lane width follows from ``world * g``).
    """

    cluster_id: int
    name: str
    id: int
    clients: tuple
    hosts: tuple[str, ...]
    slot_base: int
    num_slots: int
    granularity: int

    @property
    def world(self) -> int:
        return len(self.clients)

    def rank(self, client: Hashable) -> int:
        """Rank of ``client`` in this job (ValueError if it is not a member)."""
        try:
            return self.clients.index(client)
        except ValueError:
            raise ValueError(f"client {client!r} is not a member of job {self.name} "
                             f"(members: {list(self.clients)})") from None

    def worker_spec(self, client: Hashable, round_base: int, token: int):
        """The :class:`host.transport.job.JobSpec` worker ``client`` runs this job with.

        ``round_base`` must be fresh for every session (:func:`host.transport.job.session_round_base`):
        the switch keeps each slot's last round across membership changes. ``token`` is the
        job's as installed (``ClusterNetwork.controller.tokens[job.id]``).
        """
        from host.transport.job import JobSpec

        return JobSpec(self.id, self.rank(client), self.world, num_slots=self.num_slots,
                       granularity=self.granularity, round_base=round_base, token=token)

    def as_dict(self) -> dict:
        return {"cluster_id": self.cluster_id, "name": self.name, "id": self.id,
                "clients": list(self.clients), "hosts": list(self.hosts),
                "slot_base": self.slot_base, "num_slots": self.num_slots}


@dataclass(frozen=True)
class NetworkPlan:
    """The controller file for one membership, and its jobs.

    Attributes
    ----------
    config : dict
        The controller file (``docs/controller.md``): the base plus ``jobs``.
    jobs : dict
        ``cluster id -> ClusterJob`` for every non-empty cluster.
    clusters : dict
        The membership it was built from (``cluster id -> list of clients``).
    diff : JobDiff
        Jobs added / removed / changed compared with the previous plan (all added for the first).
    """

    config: dict
    jobs: dict[int, ClusterJob]
    clusters: dict[int, list]
    diff: JobDiff

    def network_config(self, base_dir: Path | None = None) -> NetworkConfig:
        """The validated controller config (:func:`control_plane.config.parse_config`)."""
        return parse_config(self.config, base_dir=base_dir, source="FIELDING cluster network")

    def job_of(self, client: Hashable) -> ClusterJob:
        """The job ``client`` belongs to (KeyError if it is in no cluster)."""
        for job in self.jobs.values():
            if client in job.clients:
                return job
        raise KeyError(f"client {client!r} is in no cluster")

    def as_dict(self) -> dict:
        return {"jobs": [j.as_dict() for j in self.jobs.values()], "diff": self.diff.as_dict()}


def _cluster_int(cid: Any) -> int:
    try:
        value = operator.index(cid)
    except TypeError:
        value = -1
    if value < 0:
        raise ValueError(f"clusters: cluster id {cid!r} is not a non-negative integer; job ids are "
                         "job_id_base + cluster id (FieldingClusterer uses 0, 1, 2, ...)")
    return value


def _allocate_slots(wanted: Sequence[int], keep: Mapping[int, int], num_slots: int,
                    pool: int) -> dict[int, int]:
    """Slot bases: clusters in ``keep`` keep theirs, the others take the first free range."""
    out = {c: keep[c] for c in wanted if c in keep}
    taken = sorted((b, b + num_slots) for b in out.values())
    for c in sorted(wanted):
        if c in out:
            continue
        start = 0
        for s, e in taken:
            if start + num_slots <= s:
                break
            start = max(start, e)
        if start + num_slots > pool:
            raise ValueError(f"num_slots: {len(wanted)} clusters x {num_slots} slots do not fit the "
                             f"switch's pool of {pool} slots; lower num_slots or K_max")
        out[c] = start
        taken = sorted([*taken, (start, start + num_slots)])
    return out


def plan_network(
    base: Mapping[str, Any],
    clusters: Mapping[Any, Sequence[Hashable]],
    *,
    previous: NetworkPlan | None = None,
    thc: Mapping[str, Any] | None = None,
    num_slots: int = DEFAULT_NUM_SLOTS,
    job_id_base: int = DEFAULT_JOB_ID_BASE,
    host_of: Callable[[Hashable], str] | None = None,
    prefix: str = "fielding",
    slot_pool: int = DEFAULT_SLOT_POOL,
) -> NetworkPlan:
    """The controller file with one THC aggregation job per non-empty cluster (pure).

    Parameters
    ----------
    base : mapping
        Controller file without ``jobs`` (``switches``, ``hosts``, optional ``links``,
        ``paths``, ``controller``).
    clusters : mapping
        ``cluster id -> clients``, e.g. :attr:`FieldingClusterer.clusters`. Cluster ids are
        non-negative integers; a client is in at most one cluster.
    previous : NetworkPlan, optional
        The plan installed now: surviving clusters keep their slot ranges, and
        :attr:`NetworkPlan.diff` is computed against it.
    thc : mapping, optional
        ``{b, g, p}`` of every job (controller syntax); default THC's ``{4, 30, 1/32}``.
    num_slots : int
        Slots per job.
    job_id_base : int
        Job id of cluster 0; cluster ``k`` gets ``job_id_base + k``.
    host_of : callable, optional
        Client id -> host name in ``base``; default: the client id is the host name.
    prefix : str
        Job names are ``<prefix>-c<cluster id>``.
    slot_pool : int
        Slots of the switch (256 in the P4 program and the software target by default).

    Raises
    ------
    ValueError
        For a bad cluster id, a client without a host, a client in two clusters, a base that
        already has jobs, or jobs that do not fit; the message names the field.
    """
    if "jobs" in base:
        raise ValueError("base.jobs: the cluster network owns the jobs of the file; remove `jobs` "
                         "from the base config")
    if not 1 <= num_slots <= 0xFFFF:
        raise ValueError(f"num_slots={num_slots}: need 1..65535")
    host_of = host_of or (lambda c: c)  # type: ignore[assignment, return-value]
    ids = {cid: _cluster_int(cid) for cid in clusters}
    if len(set(ids.values())) != len(ids):
        raise ValueError(f"clusters: ids {list(clusters)} name one cluster twice")
    members = {ids[c]: list(m) for c, m in clusters.items()}
    for c, m in members.items():
        if len(set(m)) > MAX_WORKERS:
            raise ValueError(f"clusters[{c}]: {len(set(m))} clients; one aggregation job holds at most "
                             f"{MAX_WORKERS} (the switch's contributor bitmap); use smaller clusters")
    by_name = jobs_for(members, prefix)  # ValueError if a client is in two clusters
    _, jdiff = diff_jobs(previous.clusters if previous else None, members, prefix)
    hosts = {h.get("name") for h in base.get("hosts") or [] if isinstance(h, Mapping)}
    g = int((thc or {}).get("g", 30))
    live = sorted(j.cluster_id for j in by_name.values())
    for cid in live:
        jid = job_id_base + cid
        if not 0 <= jid <= MAX_JOB_ID:
            raise ValueError(f"job_id_base: cluster {cid} would get job id {jid}, outside "
                             f"0..{MAX_JOB_ID}; lower job_id_base")
    keep = {}
    if previous is not None:
        keep = {c: j.slot_base for c, j in previous.jobs.items() if j.num_slots == num_slots}
    bases = _allocate_slots(live, keep, num_slots, slot_pool)
    jobs: dict[int, ClusterJob] = {}
    raw_jobs = []
    for aj in sorted(by_name.values(), key=lambda j: j.cluster_id):
        cid = aj.cluster_id
        names = []
        for c in aj.members:
            h = host_of(c)
            if h not in hosts:
                raise ValueError(f"clusters[{cid}]: client {c!r} maps to host {h!r}, which is not in "
                                 f"base.hosts ({', '.join(sorted(map(str, hosts)))}); add it or fix "
                                 "host_of")
            names.append(h)
        job = ClusterJob(cid, aj.job_id, job_id_base + cid, tuple(aj.members), tuple(names),
                         bases[cid], num_slots, g)
        jobs[cid] = job
        entry: dict[str, Any] = {"name": job.name, "id": job.id, "members": names,
                                 "num_slots": num_slots, "slot_base": job.slot_base}
        if thc is not None:
            entry["thc"] = dict(thc)
        raw_jobs.append(entry)
    config = {**base, "jobs": raw_jobs}
    return NetworkPlan(config, jobs, {c: list(jobs[c].clients) for c in jobs}, jdiff)


def job_entries(cfg: NetworkConfig, p4info=None,
                tokens: dict[int, int] | None = None) -> dict[str, dict[str, frozenset]]:
    """``job name -> switch -> {(key, value)}`` of the job's entries (pure).

    The keys and values are the controller's normalised forms
    (:func:`control_plane.reconcile.normalise`), so two configs can be compared job by job:
    equal sets mean reconciling from one to the other leaves the job's entries alone.
    Routes are listed under the pseudo job ``"<routes>"``. ``tokens``: job id -> the job's
    token (``set_job.token``; 0 for a job not in it).
    """
    import finsy as fy

    from control_plane.desired import load_p4info
    from control_plane.p4names import program_view

    info = program_view(p4info if p4info is not None else load_p4info(cfg)[0])
    schema = fy.P4Schema(info)
    placement = place(cfg, limits_from_p4info(info))
    out: dict[str, dict[str, set]] = {}
    for sw, items in placement.per_switch.items():
        for j in items:
            ents = (thc_validate.entries(j, (tokens or {}).get(j.job.id, 0)) + thc_load.entries(j)
                    + thc_members.entries(j)
                    + multicast.entries(j))
            out.setdefault(j.job.name, {}).setdefault(sw, set()).update(
                (n.key, n.value) for n in (normalise(e, schema) for e in ents))
    for sw, ents in routing.entries(cfg).items():
        out.setdefault("<routes>", {}).setdefault(sw, set()).update(
            (n.key, n.value) for n in (normalise(e, schema) for e in ents))
    return {name: {sw: frozenset(s) for sw, s in per.items()} for name, per in out.items()}


def touched_jobs(before: Mapping[str, Mapping[str, frozenset]],
                 after: Mapping[str, Mapping[str, frozenset]]) -> list[str]:
    """Jobs (and ``"<routes>"``) whose entries differ between two :func:`job_entries`."""
    return sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))


@dataclass
class NetworkUpdate:
    """Outcome of :meth:`ClusterNetwork.update`.

    Attributes
    ----------
    plan : NetworkPlan
        What is installed now.
    writes : int
        P4Runtime updates written, all switches.
    writes_per_switch : dict
        ``switch -> updates``.
    predicted_writes : dict
        ``switch -> updates`` the change of desired state implies (computed offline from the
        previous and new plans; ``None`` for the first update). Equal to ``writes_per_switch``
        unless the switch held something else (restart, foreign writes).
    touched_jobs : list
        Jobs whose entries changed (job names; ``"<routes>"`` for routes).
    foreign_per_switch : dict
        ``switch -> entries`` installed but neither desired nor marked as this controller's,
        left alone unless ``prune``. A target that drops the owner ``metadata`` (the software
        target does for multicast groups) leaves the group of a job that left a switch here:
        then ``writes + foreign == predicted_writes``.
    results : list of SwitchResult
    """

    plan: NetworkPlan
    writes: int
    writes_per_switch: dict[str, int]
    predicted_writes: dict[str, int] | None
    touched_jobs: list[str]
    foreign_per_switch: dict[str, int] = field(default_factory=dict)
    results: list[SwitchResult] = field(repr=False, default_factory=list)

    @property
    def job_diff(self) -> JobDiff:
        return self.plan.diff

    def as_dict(self) -> dict:
        return {"writes": self.writes, "writes_per_switch": self.writes_per_switch,
                "predicted_writes": self.predicted_writes, "touched_jobs": self.touched_jobs,
                "foreign_per_switch": self.foreign_per_switch,
                **self.plan.as_dict()}


class ClusterNetwork:
    """Keeps the switches' aggregation jobs equal to a FIELDING clustering.

    Parameters
    ----------
    base : mapping
        Controller file without ``jobs`` (see :func:`plan_network`).
    thc, num_slots, job_id_base, host_of, prefix
        As in :func:`plan_network`; fixed for the lifetime of the network.
    base_dir : Path, optional
        Folder relative paths of ``base`` are read from.
    election_id : int, optional
        P4Runtime election id of the writes (default: the file's, 10).
    timeout : float
        Seconds to wait for a switch.
    p4info : P4Info, optional
        Default: :func:`control_plane.desired.load_p4info` (read once).
    prune : bool
        Also delete foreign entries (``netco controller apply --prune``): only when this
        network is the switches' sole writer.

    Examples
    --------
    >>> net = ClusterNetwork(base)                                   # doctest: +SKIP
    >>> net.update({0: ["c0", "c1", "c2"], 1: ["c3", "c4", "c5"]}).writes   # doctest: +SKIP
    >>> net.update(clusterer.clusters).touched_jobs                  # doctest: +SKIP
    """

    def __init__(self, base: Mapping[str, Any], *, thc: Mapping[str, Any] | None = None,
                 num_slots: int = DEFAULT_NUM_SLOTS, job_id_base: int = DEFAULT_JOB_ID_BASE,
                 host_of: Callable[[Hashable], str] | None = None, prefix: str = "fielding",
                 base_dir: Path | None = None, election_id: int | None = None,
                 timeout: float = 15.0, p4info=None, prune: bool = False) -> None:
        self.base = dict(base)
        self.thc = dict(thc) if thc is not None else None
        self.num_slots = num_slots
        self.job_id_base = job_id_base
        self.host_of = host_of
        self.prefix = prefix
        self.base_dir = base_dir
        self.election_id = election_id
        self.timeout = timeout
        self.p4info = p4info
        self.prune = prune
        self.plan: NetworkPlan | None = None
        self.controller: Controller | None = None
        self._entries: dict[str, dict[str, frozenset]] | None = None
        self.history: list[NetworkUpdate] = []
        #: times a switch that refused us as not primary is tried again (see :meth:`_apply`)
        self.primary_retries = 5

    def plan_for(self, clusters: Mapping[Any, Sequence[Hashable]]) -> NetworkPlan:
        """The plan for ``clusters`` after the installed one (pure; nothing is written)."""
        pool = DEFAULT_SLOT_POOL
        if self.p4info is not None:
            pool = limits_from_p4info(self.p4info).slot_pool
        return plan_network(self.base, clusters, previous=self.plan, thc=self.thc,
                            num_slots=self.num_slots, job_id_base=self.job_id_base,
                            host_of=self.host_of, prefix=self.prefix, slot_pool=pool)

    async def aupdate(self, clusters: Mapping[Any, Sequence[Hashable]]) -> NetworkUpdate:
        """Install the jobs of ``clusters``: rebuild the file and reconcile every switch.

        Raises
        ------
        ValueError, control_plane.config.ConfigError
            The membership does not make a valid file (nothing is written).
        ControllerError
            A switch was unreachable or a write failed (the plan is not advanced; the next
            update reconciles from whatever the switch holds).
        """
        plan = self.plan_for(clusters)
        cfg = plan.network_config(self.base_dir)
        # jobs that stay keep their tokens (running workers hold them); new ones draw theirs
        ctl = Controller(cfg, p4info=self.p4info, election_id=self.election_id, timeout=self.timeout,
                         tokens=self.controller.tokens if self.controller is not None else None)
        self.p4info = ctl.p4info
        await ctl.adopt_tokens(ctl.cfg.switches)   # what the switches hold wins
        entries = job_entries(cfg, ctl.p4info, ctl.tokens)
        predicted = None
        if self.controller is not None:
            predicted = {sw: diff(ctl.desired.get(sw, []), self.controller.desired.get(sw, []),
                                  ctl.schema).writes
                         for sw in ctl.desired.keys() | self.controller.desired.keys()}
        touched = touched_jobs(self._entries or {}, entries)
        results = await self._apply(ctl)
        bad = [r.error for r in results if not r.ok]
        if bad:
            raise ControllerError("cluster network update failed: " + "; ".join(map(str, bad)))
        per = {r.switch: r.writes for r in results}
        foreign = {r.switch: len(r.diff.foreign) if r.diff is not None else 0 for r in results}
        upd = NetworkUpdate(plan, sum(per.values()), per, predicted, touched, foreign, results)
        if any(foreign.values()) and not self.prune:
            log.info("cluster network: foreign entries left in place %s (prune=True deletes them)",
                     {k: v for k, v in foreign.items() if v})
        stale = [n for n in touched if n.startswith(f"{self.prefix}-c")
                 and n not in {j.job_id for j in (*plan.diff.added, *plan.diff.removed)}
                 and n not in {c.job_id for c in plan.diff.changed}]
        if stale:
            log.info("cluster network: jobs %s keep their members but changed entries (job "
                     "index moved: a job with a smaller id appeared or disappeared)", stale)
        log.info("cluster network: %d jobs, %d P4Runtime updates (%s); touched %s",
                 len(plan.jobs), upd.writes, per, touched)
        self.plan, self.controller, self._entries = plan, ctl, entries
        self.history.append(upd)
        return upd

    async def _apply(self, ctl: Controller) -> list[SwitchResult]:
        """``ctl.apply()``, retrying a switch that refused us as not primary.

        A read-only session (:meth:`status`) that just closed may still hold the switch's
        highest election id for a moment (finsy adopts it when no writer is connected;
        docs/controller.md, "Reconciliation"), so the next write can be refused once. A
        controller that really is a backup is still refused after the retries.
        """
        async def one(sw) -> SwitchResult:
            for attempt in range(self.primary_retries + 1):
                try:
                    return await ctl.apply_switch(sw, prune=self.prune)
                except NotPrimaryError as exc:
                    if attempt == self.primary_retries:
                        return SwitchResult(sw.name, sw.address, error=str(exc))
                    log.debug("%s: not primary yet (%s), retrying", sw.name, exc)
                    await asyncio.sleep(0.2 * (attempt + 1))
                except ControllerError as exc:
                    return SwitchResult(sw.name, sw.address, error=str(exc))
                except Exception as exc:  # reported per switch, like Controller.apply
                    return SwitchResult(sw.name, sw.address, error=f"{sw.name}: {exc}")
            raise AssertionError("unreachable")

        return list(await asyncio.gather(*(one(sw) for sw in ctl.cfg.switches)))

    def update(self, clusters: Mapping[Any, Sequence[Hashable]]) -> NetworkUpdate:
        """Synchronous :meth:`aupdate` (must not be called from a running event loop)."""
        return asyncio.run(self.aupdate(clusters))

    def status(self) -> list[SwitchResult]:
        """The controller's status of every switch (entries, drift, counters)."""
        if self.controller is None:
            raise RuntimeError("no clusters installed yet: call update() first")
        return asyncio.run(self.controller.status())

    def contributions(self) -> dict[int, dict[str, int]]:
        """``cluster id -> switch -> contributions`` counted by the switch for its job.

        Read from the per-job counter ``ingress.thc_slot.contributions`` at the job's current
        index. Counters are cumulative and belong to the index, not the job: compare
        differences between two reads with no membership change in between that moves indices.
        """
        if self.controller is None or self.plan is None:
            raise RuntimeError("no clusters installed yet: call update() first")
        placement = self.controller.placement
        out: dict[int, dict[str, int]] = {c: {} for c in self.plan.jobs}
        by_name = {j.name: c for c, j in self.plan.jobs.items()}
        for r in self.status():
            if not r.ok:
                raise ControllerError(r.error or f"{r.switch}: status failed")
            counts = r.counters.get(CONTRIBUTIONS, {})
            for js in placement.per_switch.get(r.switch, ()):
                cid = by_name.get(js.job.name)
                if cid is not None:
                    out[cid][r.switch] = int(counts.get(js.index, 0))
        return out
