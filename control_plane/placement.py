"""Place jobs onto switches: job indices, slot ranges, multicast groups and per-switch roles.

Pure functions over a validated :class:`~control_plane.config.NetworkConfig` and the switch's
capacities (:class:`Limits`, read from the P4Info). The per-control modules
(``thc_validate``, ``thc_load``, ``thc_members``, ``multicast``) turn each
:class:`JobAtSwitch` into P4Runtime entities.

Rules (docs/protocol.md, "Slots, rounds, copies" and "Aggregation tree"):

* job ``index`` (counter index, ``set_job.index``) = position of the job in id order; it must
  stay below the ``jobs`` table size (``MAX_JOBS``);
* every job owns one contiguous slot range ``[slot_base, slot_base + num_slots)`` of the switch
  slot pool, the same on every switch of its tree; ranges never overlap; explicit
  ``slot_base`` values are honoured, the other jobs are packed first-fit in id order;
* multicast group id = index + 1 on every switch (group 0 means "no multicast" in v1model);
* at a switch a job counts its direct contributors: the members attached there (contributor
  id = the worker's global rank) and its child switches. A child's id (its ``self_id``, sent
  as ``rank`` in PARTIALs) is the lowest worker rank in its subtree, which never collides with
  a rank counted at the parent, because subtrees are disjoint (the switch's contributor bitmap
  is indexed by ``rank``).
"""

from __future__ import annotations

from dataclasses import dataclass

from finsy.proto import p4i

from control_plane.config import ConfigError, JobSpec, NetworkConfig
from control_plane.p4names import program_view
from host.protocol import generated_dataplane as dp

#: Slot pool when the P4Info does not reveal it (p4/v1model/include/size.p4: THC_SLOTS).
DEFAULT_SLOT_POOL = dp.THC_SLOTS
#: Register cells per slot: 2 copies (round parity) x 2 kinds (data, norms) (thc_slot.p4).
CELLS_PER_SLOT = 4
#: Register that holds one entry per cell in thc_slot.p4; its size / CELLS_PER_SLOT = pool.
SLOT_REGISTER_SUFFIX = "round_reg"

JOBS_TABLE = "ingress.thc_validate.jobs"
SENDERS_TABLE = "ingress.thc_validate.senders"
MEMBERS_TABLE = "egress.thc_members.members"
ROUTES_TABLE = "ingress.routing.routes"


@dataclass(frozen=True)
class Limits:
    """Capacities of the switch program (from its P4Info)."""

    max_jobs: int = dp.MAX_JOBS
    slot_pool: int = DEFAULT_SLOT_POOL
    senders: int = dp.SENDERS_TABLE_SIZE
    members: int = dp.MEMBERS_TABLE_SIZE
    routes: int = dp.ROUTES_TABLE_SIZE


def limits_from_p4info(info: p4i.P4Info | None) -> Limits:
    """Table sizes and the slot pool of the program described by ``info``.

    The slot pool is the size of the ``…round_reg`` register divided by
    :data:`CELLS_PER_SLOT` when the P4Info lists registers (p4c does), else
    :data:`DEFAULT_SLOT_POOL`.
    """
    if info is None:
        return Limits()
    info = program_view(info)
    sizes = {t.preamble.name: int(t.size) for t in info.tables}
    pool = DEFAULT_SLOT_POOL
    for r in info.registers:
        if r.preamble.name.endswith(SLOT_REGISTER_SUFFIX) and r.size:
            pool = int(r.size) // CELLS_PER_SLOT
    d = Limits()
    return Limits(
        max_jobs=sizes.get(JOBS_TABLE) or d.max_jobs,
        slot_pool=pool,
        senders=sizes.get(SENDERS_TABLE) or d.senders,
        members=sizes.get(MEMBERS_TABLE) or d.members,
        routes=sizes.get(ROUTES_TABLE) or d.routes,
    )


@dataclass(frozen=True)
class Contributor:
    """A direct contributor (or result receiver) of a job at one switch."""

    name: str  # host or child switch
    rank: int  # worker rank, or the child switch's id
    port: int  # port of this switch that leads to it
    ip: str
    mac: str
    is_switch: bool
    #: the UDP source port its sender binding names (the job's ``worker_port``); 0: any port
    #: (a child switch, or a job whose members send from ephemeral ports)
    udp_port: int = 0


@dataclass(frozen=True)
class JobAtSwitch:
    """Everything one switch needs to serve one job (the arguments of its entries)."""

    job: JobSpec
    switch: str
    index: int
    slot_base: int
    num_slots: int
    lane_bits: int
    mcast_grp: int
    self_addr: str
    self_id: int
    parent: str | None
    parent_port: int
    parent_addr: str
    contributors: tuple[Contributor, ...]
    #: ranks of contributors the controller's watch found dead (``control_plane.thc_slot``):
    #: not waited for (``expected`` leaves them out), still senders and receivers, so that their
    #: return shows in the per-rank counter
    absent: frozenset[int] = frozenset()

    @property
    def expected(self) -> int:
        """Distinct direct contributors that complete a slot at this switch (those held
        :attr:`absent` left out)."""
        return sum(1 for c in self.contributors if c.rank not in self.absent)

    @property
    def receivers(self) -> tuple[Contributor, ...]:
        """Who gets this switch's results: its workers and child switches (the same set)."""
        return self.contributors


@dataclass(frozen=True)
class Placement:
    """Jobs placed on switches."""

    index: dict[str, int]  # job name -> index
    slots: dict[str, tuple[int, int]]  # job name -> (slot_base, num_slots)
    per_switch: dict[str, tuple[JobAtSwitch, ...]]


def _job_field(cfg: NetworkConfig, job: JobSpec, name: str) -> str:
    return f"jobs[{cfg.jobs.index(job)}].{name}"


def allocate_slots(cfg: NetworkConfig, pool: int) -> dict[str, tuple[int, int]]:
    """Non-overlapping slot ranges: explicit ``slot_base`` first, the rest first-fit by id.

    Raises
    ------
    ConfigError
        If a range leaves the pool, two explicit ranges overlap, or the jobs need more slots
        than the pool holds.
    """
    problems: list[str] = []
    taken: list[tuple[int, int, str]] = []  # (start, end, job)
    out: dict[str, tuple[int, int]] = {}
    for job in sorted(cfg.jobs, key=lambda j: j.id):
        if job.slot_base is None:
            continue
        start, end = job.slot_base, job.slot_base + job.num_slots
        if end > pool:
            problems.append(f"{_job_field(cfg, job, 'slot_base')}: slots {start}..{end - 1} leave the "
                            f"switch's pool of {pool} slots; lower slot_base or num_slots")
            continue
        clash = next((t for t in taken if start < t[1] and t[0] < end), None)
        if clash:
            problems.append(f"{_job_field(cfg, job, 'slot_base')}: slots {start}..{end - 1} overlap job "
                            f"{clash[2]}'s {clash[0]}..{clash[1] - 1}; move one of them")
            continue
        taken.append((start, end, job.name))
        out[job.name] = (start, job.num_slots)
    for job in sorted(cfg.jobs, key=lambda j: j.id):
        if job.slot_base is not None:
            continue
        start = 0
        for s, e, _ in sorted(taken):
            if start + job.num_slots <= s:
                break
            start = max(start, e)
        if start + job.num_slots > pool:
            total = sum(j.num_slots for j in cfg.jobs)
            problems.append(f"{_job_field(cfg, job, 'num_slots')}: no free range of {job.num_slots} "
                            f"slots left (all jobs ask for {total}, the switch has {pool}); "
                            "lower num_slots of some jobs")
            continue
        taken.append((start, start + job.num_slots, job.name))
        out[job.name] = (start, job.num_slots)
    if problems:
        raise ConfigError(problems)
    return out


def place(cfg: NetworkConfig, limits: Limits | None = None) -> Placement:
    """Place every job of ``cfg`` onto the switches of its tree.

    Raises
    ------
    ConfigError
        If there are more jobs than the switch serves, slots do not fit, or a switch's tables
        would overflow.
    """
    limits = limits or Limits()
    jobs = sorted(cfg.jobs, key=lambda j: j.id)
    if len(jobs) > limits.max_jobs:
        raise ConfigError([f"jobs: {len(jobs)} jobs, the switch program serves {limits.max_jobs} "
                           "at once (jobs table size); remove some"])
    index = {j.name: i for i, j in enumerate(jobs)}
    slots = allocate_slots(cfg, limits.slot_pool)
    per_switch: dict[str, list[JobAtSwitch]] = {s.name: [] for s in cfg.switches}
    for job in jobs:
        for js in _job_at_switches(cfg, job, index[job.name], slots[job.name]):
            per_switch[js.switch].append(js)
    problems = []
    for sw, items in per_switch.items():
        senders = sum(len(j.contributors) for j in items)
        if senders > limits.senders:
            problems.append(f"switches[{[s.name for s in cfg.switches].index(sw)}]: {sw} would need "
                            f"{senders} sender entries, its table holds {limits.senders}; "
                            "spread the jobs over more switches")
    if problems:
        raise ConfigError(problems)
    return Placement(index, slots, {k: tuple(v) for k, v in per_switch.items()})


def _job_at_switches(cfg: NetworkConfig, job: JobSpec, index: int,
                     slots: tuple[int, int]) -> list[JobAtSwitch]:
    rank = {h: r for r, h in enumerate(job.members)}
    nodes = {n.switch: n for n in job.tree}
    children: dict[str, list[str]] = {n.switch: [] for n in job.tree}
    for n in job.tree:
        if n.parent is not None:
            children[n.parent].append(n.switch)

    def subtree_ranks(sw: str) -> list[int]:
        out = [rank[h] for h in nodes[sw].members]
        for c in children[sw]:
            out += subtree_ranks(c)
        return out

    self_id = {sw: min(subtree_ranks(sw)) for sw in nodes}
    out = []
    for n in job.tree:
        me = cfg.switch(n.switch)
        nbr = cfg.neighbours(n.switch)
        contributors = [
            Contributor(h, rank[h], cfg.host(h).port, cfg.host(h).ip, cfg.host(h).mac, False,
                        job.worker_port or 0)
            for h in n.members
        ]
        for c in children[n.switch]:
            cs = cfg.switch(c)
            contributors.append(Contributor(c, self_id[c], nbr[c], cs.addr, cs.mac, True))
        contributors.sort(key=lambda c: c.rank)
        parent = cfg.switch(n.parent) if n.parent is not None else None
        out.append(JobAtSwitch(
            job=job, switch=n.switch, index=index, slot_base=slots[0], num_slots=slots[1],
            lane_bits=job.lane_bits, mcast_grp=index + 1, self_addr=me.addr,
            self_id=self_id[n.switch] if parent is not None else 0,
            parent=n.parent, parent_port=nbr[n.parent] if parent is not None else 0,
            parent_addr=parent.addr if parent is not None else "0.0.0.0",
            contributors=tuple(contributors),
        ))
    return out
