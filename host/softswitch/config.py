"""Compile the controller's entries of the netco program into arrays the data plane reads.

The P4Runtime store (:mod:`host.softswitch.entities`) is generic; this module knows the
program's tables by name (``docs/protocol.md``, "Controller-installed state") and turns them
into numpy lookups: job id -> job number, per-job parameters, a 256-entry byte -> (high, low)
THC-table lookup per job (THC step 9, Li et al. NSDI 2024: the switch adds L[q]), sorted sender
keys, member addresses and multicast replicas. A new :class:`Compiled` is built after every
write and swapped in atomically; the data plane reads one reference per batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import numpy as np
from finsy.proto import p4r

from host.protocol import layout as lay
from host.protocol.jobs import job_problems, overlaps, width_problem
from host.softswitch.entities import EntityStore, P4RuntimeError
from host.softswitch.p4info import TableInfo

JOBS = "ingress.thc_validate.jobs"
SET_JOB = "ingress.thc_validate.set_job"
SENDERS = "ingress.thc_validate.senders"
SENDER = "ingress.thc_validate.sender"
TABLES = "ingress.thc_load.tables"
LOAD_TABLE = "ingress.thc_load.load_table"
MEMBERS = "egress.thc_members.members"
SET_MEMBER = "egress.thc_members.set_member"
ROUTES = "ingress.routing.routes"
ROUTE = "ingress.routing.route"
DROPS = "ingress.drops"
CONTRIBUTIONS = "ingress.thc_slot.contributions"
#: per job and rank (optional: a P4Info without it gets no per-rank counts)
RANK_CONTRIBUTIONS = "ingress.thc_slot.rank_contributions"
RESULTS = "ingress.thc_output.results"
RESENT = "ingress.thc_output.resent"
#: times a source was held by the rate limit (optional, like RANK_CONTRIBUTIONS)
RATE_TRIPS = "ingress.rate_limit.trips"

#: tables, actions and counters the data plane implements (a pushed P4Info must have them).
REQUIRED_TABLES = (JOBS, SENDERS, TABLES, MEMBERS, ROUTES)
REQUIRED_ACTIONS = (SET_JOB, SENDER, LOAD_TABLE, SET_MEMBER, ROUTE)
REQUIRED_COUNTERS = (DROPS, CONTRIBUTIONS, RESULTS, RESENT)

#: columns of :attr:`Compiled.presence`
PRESENCE_MASK, PRESENCE_ABSENT, PRESENCE_MISS = 0, 1, 2
PRESENCE_HEARD = PRESENCE_MISS + lay.MAX_WORKERS
PRESENCE_COLS = PRESENCE_HEARD + lay.MAX_WORKERS

JOB_PARAMS = ("index", "slot_base", "num_slots", "expected", "lane_bits", "mcast_grp",
              "has_parent", "parent_port", "parent_addr", "self_addr", "self_id", "token")


def sender_key(job: np.ndarray | int, rank, port, addr):
    """64-bit key of a (job number, rank, port, IPv4 address) sender binding."""
    return ((np.uint64(job) << np.uint64(49)) | (np.uint64(rank) << np.uint64(41))
            | (np.uint64(port) << np.uint64(32)) | np.uint64(addr))


def member_key(job_id, port):
    """Key of a (job id, egress port) member entry."""
    return (np.int64(job_id) << np.int64(9)) | np.int64(port)


@dataclass
class Compiled:
    """Everything the data plane reads, as arrays (one immutable snapshot)."""

    #: job id (0..65535) -> job number, -1 without an entry
    job_map: np.ndarray = field(default_factory=lambda: np.full(1 << 16, -1, dtype=np.int32))
    #: per job number (plus one dummy row so that index -1 is harmless): the set_job parameters
    job: dict[str, np.ndarray] = field(default_factory=dict)
    job_id: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    has_table: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=bool))
    #: per job number: the largest value a values-uplink lane may carry, the job's g (its THC
    #: table's largest value); 255 (the lane's range: no bound) for a job without a table
    value_top: np.ndarray = field(default_factory=lambda: np.full(1, 255, dtype=np.int64))
    #: (jobs + 1, 256, 2) uint32: packed byte -> (L[high nibble], L[low nibble])
    lut: np.ndarray = field(default_factory=lambda: np.zeros((1, 256, 2), dtype=np.uint32))
    sender_keys: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    sender_is_switch: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    #: per sender binding (as ``sender_keys``): the UDP source port it names, 0 = any (issue 33)
    sender_port: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint16))
    member_keys: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    member_mac: np.ndarray = field(default_factory=lambda: np.zeros((0, 6), dtype=np.uint8))
    member_addr: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint32))
    groups: dict[int, np.ndarray] = field(default_factory=dict)
    #: ordinary routes, longest prefix first: (prefix_len, value, port, src_mac, dst_mac)
    routes: list[tuple[int, int, int, bytes, bytes]] = field(default_factory=list)
    #: per job number (plus the dummy row), int64: column ``PRESENCE_MASK`` the bitmap of the
    #: ranks with a sender entry; ``PRESENCE_ABSENT`` the ranks the data plane has learned to be
    #: absent, ``PRESENCE_MISS + r`` rank r's deadline releases in a row without it and
    #: ``PRESENCE_HEARD + r`` when it was last heard from (CLOCK_MONOTONIC, ns; the Write that
    #: installed it until its first contribution; ``docs/protocol.md``, "Absent
    #: contributors"). The only part the data plane writes; a controller's Write starts it
    #: afresh.
    presence: np.ndarray = field(
        default_factory=lambda: np.zeros((1, PRESENCE_COLS), dtype=np.int64))

    def __post_init__(self) -> None:
        for p in JOB_PARAMS:
            self.job.setdefault(p, np.zeros(1, dtype=np.int64))

    @property
    def lut64(self) -> np.ndarray:
        """:attr:`lut` with each (high, low) pair as one uint64 (one gather per byte)."""
        return self.lut.view(np.uint64).reshape(self.lut.shape[0], 256)


def _params(store: EntityStore, action: str, params: dict[int, int]) -> dict[str, int]:
    a = store.index.action(action)
    return {a.params[pid][0]: v for pid, v in params.items()}


def _field_values(store: EntityStore, table: str, key: tuple) -> dict[str, tuple]:
    t = store.index.table(table)
    return {t.fields[fid].name: val for fid, val in key[0]}


def compile_store(store: EntityStore) -> Compiled:
    """Build the data plane's view of ``store`` (tables looked up by name)."""
    idx = store.index
    c = Compiled()
    jobs_t = store.tables[idx.table(JOBS).id]
    set_job = idx.action(SET_JOB).id
    rows: list[dict[str, int]] = []
    ids: list[int] = []
    for e in jobs_t.entries.values():
        if e.action_id != set_job:
            continue
        k = _field_values(store, JOBS, e.key)
        ids.append(k["job_id"][1])
        rows.append(_params(store, SET_JOB, e.params))
    n = len(rows)
    for i, jid in enumerate(ids):
        c.job_map[jid] = i
    c.job = {p: np.array([r[p] for r in rows] + [0], dtype=np.int64) for p in JOB_PARAMS}
    c.job_id = np.array([*ids, 0], dtype=np.int64)
    c.has_table = np.zeros(n + 1, dtype=bool)
    c.value_top = np.full(n + 1, 255, dtype=np.int64)
    c.lut = np.zeros((n + 1, 256, 2), dtype=np.uint32)
    load = idx.action(LOAD_TABLE).id
    b = np.arange(256)
    for e in store.tables[idx.table(TABLES).id].entries.values():
        jn = c.job_map[_field_values(store, TABLES, e.key)["job_id"][1]]
        if jn < 0 or e.action_id != load:
            continue
        p = _params(store, LOAD_TABLE, e.params)
        table = np.array([p[f"v{i}"] for i in range(lay.TABLE_ENTRIES)], dtype=np.uint32)
        c.lut[jn, :, 0] = table[b >> 4]      # even element: high nibble (THC step 8)
        c.lut[jn, :, 1] = table[b & 0x0F]
        c.has_table[jn] = True
        c.value_top[jn] = int(table.max())
    keys, sw, sport = [], [], []
    c.presence = np.zeros((n + 1, PRESENCE_COLS), dtype=np.int64)
    now = time.monotonic_ns()          # every rank counts as heard when its job is written
    sender = idx.action(SENDER).id
    for e in store.tables[idx.table(SENDERS).id].entries.values():
        f = _field_values(store, SENDERS, e.key)
        jn = c.job_map[f["job_id"][1]]
        if jn < 0 or e.action_id != sender:
            continue  # no job entry: the packet is dropped as UNKNOWN_JOB before this table
        rank = f["rank"][1]
        keys.append(int(sender_key(jn, rank, f["ingress_port"][1], f["src_addr"][1])))
        params = _params(store, SENDER, e.params)
        sw.append(params["is_switch"])
        sport.append(params["udp_port"])
        if rank < lay.MAX_WORKERS:          # a larger rank never gets to a slot
            c.presence[jn, PRESENCE_MASK] |= 1 << rank
            c.presence[jn, PRESENCE_HEARD + rank] = now
    order = np.argsort(np.array(keys, dtype=np.uint64), kind="stable")
    c.sender_keys = np.array(keys, dtype=np.uint64)[order]
    c.sender_is_switch = np.array(sw, dtype=np.uint8)[order]
    c.sender_port = np.array(sport, dtype=np.uint16)[order]
    mk, macs, addrs = [], [], []
    set_member = idx.action(SET_MEMBER).id
    for e in store.tables[idx.table(MEMBERS).id].entries.values():
        if e.action_id != set_member:
            continue
        f = _field_values(store, MEMBERS, e.key)
        p = _params(store, SET_MEMBER, e.params)
        mk.append(int(member_key(f["job_id"][1], f["egress_port"][1])))
        macs.append(list(p["dst_mac"].to_bytes(6, "big")))
        addrs.append(p["dst_addr"])
    order = np.argsort(np.array(mk, dtype=np.int64), kind="stable")
    c.member_keys = np.array(mk, dtype=np.int64)[order]
    c.member_mac = np.array(macs, dtype=np.uint8).reshape(-1, 6)[order]
    c.member_addr = np.array(addrs, dtype=np.uint32)[order]
    c.groups = {g: np.array([p for p, _ in reps], dtype=np.int64) for g, reps in store.groups.items()}
    route = idx.action(ROUTE).id
    for e in store.tables[idx.table(ROUTES).id].entries.values():
        if e.action_id != route:
            continue
        _, val, plen = _field_values(store, ROUTES, e.key)["dst_addr"]
        p = _params(store, ROUTE, e.params)
        c.routes.append((plen, val, p["port"], p["src_mac"].to_bytes(6, "big"),
                         p["dst_mac"].to_bytes(6, "big")))
    c.routes.sort(key=lambda r: -r[0])
    return c


def check_program(store: EntityStore) -> list[str]:
    """Names the data plane needs that the P4Info lacks (empty when it fits)."""
    idx = store.index
    missing = [t for t in REQUIRED_TABLES if t not in idx.table_by_name]
    missing += [a for a in REQUIRED_ACTIONS if a not in idx.action_by_name]
    missing += [k for k in REQUIRED_COUNTERS if k not in idx.counter_by_name]
    if not missing:
        a = idx.action(SET_JOB)
        names = {n for n, _ in a.params.values()}
        missing += [f"{SET_JOB}({p})" for p in JOB_PARAMS if p not in names]
    return missing


def _batch_jobs(store: EntityStore, me: int) -> dict[int, tuple[int, int] | None]:
    """Slot ranges other jobs will have after the Write being applied (None: deleted)."""
    t = store.index.table(JOBS)
    set_job = store.index.action(SET_JOB).id
    out: dict[int, tuple[int, int] | None] = {}
    for u in store.batch:
        te = u.entity.table_entry if u.entity.WhichOneof("entity") == "table_entry" else None
        if te is None or te.table_id != t.id or te.is_default_action:
            continue
        try:
            key, _ = store._decode_key(t, te)
            jid = {t.fields[fid].name: v for fid, v in key}["job_id"][1]
            if jid == me:
                continue
            if u.type == p4r.Update.DELETE:
                out[jid] = None
                continue
            aid, params = store._decode_action(t, te.action, default=False)
        except (P4RuntimeError, KeyError):
            continue   # refused on its own turn
        if aid == set_job:
            named = _params(store, SET_JOB, params)
            out[jid] = (named["slot_base"], named["num_slots"])
    return out


def job_entry_check(pool_slots: int, coords: int = lay.COORDS_PER_PACKET) -> Callable[..., None]:
    """The :attr:`EntityStore.entry_check` of a switch with ``pool_slots`` aggregation slots and
    packets of ``coords`` coordinates.

    A ``set_job`` entry must obey :func:`host.protocol.jobs.job_problems` (the controller's
    rules), have lanes that fit the packet width (:func:`host.protocol.jobs.width_problem`: at
    1024 coordinates only 8-bit lanes do), name an installed multicast group, and keep its
    slot range apart from every other job's as it will be after the current Write (so that one
    Write may move jobs past each other). Violations are ``INVALID_ARGUMENT`` naming the field.
    """

    def check(store: EntityStore, t: TableInfo, op: int, key: tuple, aid: int,
              params: dict[int, int]) -> None:
        if t.name != JOBS or aid != store.index.action(SET_JOB).id:
            return
        jid = _field_values(store, JOBS, key)["job_id"][1]
        p = _params(store, SET_JOB, params)

        def refuse(fld: str, msg: str) -> P4RuntimeError:
            return P4RuntimeError(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"table {JOBS} job {jid}: set_job.{fld}: {msg}")

        problems = job_problems(p, pool_slots=pool_slots, max_jobs=t.size)
        if problems:
            raise refuse(*problems[0])
        why = width_problem(coords, p.get("lane_bits"))
        if why is not None:
            raise refuse("lane_bits", f"{why} (this switch runs --coords-per-packet {coords})")
        grp = p["mcast_grp"]
        if grp not in store.groups:
            raise refuse("mcast_grp", f"{grp}: no such multicast group; install the group first")
        others = {}
        for e in store.tables[t.id].entries.values():
            other = _field_values(store, JOBS, e.key)["job_id"][1]
            if other != jid and e.action_id == aid:
                q = _params(store, SET_JOB, e.params)
                others[other] = (q["slot_base"], q["num_slots"])
        others.update(_batch_jobs(store, jid))
        hit = overlaps(p["slot_base"], p["num_slots"],
                       [(j, *r) for j, r in sorted(others.items()) if r is not None])
        if hit is not None:
            b, n = others[hit]
            raise refuse("slot_base", f"slots {p['slot_base']}..{p['slot_base'] + p['num_slots'] - 1}"
                                      f" overlap job {hit}'s {b}..{b + n - 1}")

    return check
