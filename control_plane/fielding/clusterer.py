"""FIELDING's cluster maintenance: drift detection, migration, selective re-clustering.

Per round (Li et al., "Fielding: Clustered Federated Learning with Data Drift",
arXiv 2411.01580):

1. a client is *drifted* when the L1 distance between its representation and the one it had
   when it was last clustered exceeds ``tau``;
2. every drifted client migrates to the cluster whose centre is nearest;
3. all clients are re-clustered (k-means, K by silhouette) when migration is not enough: more
   than a fraction ``theta`` of clients drifted, or the clustering cost after migration exceeds
   ``(1 + epsilon)`` times that of a fresh clustering;
4. a cluster created by re-clustering starts from the model of the nearest old cluster.

The class is framework-independent: it sees client ids and representation vectors only, and
reports what changed in a :class:`ClusterUpdate` so that a training loop (the offline harness
or the Flower strategy) can carry models over with :func:`carry_models`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from control_plane.fielding.clustering import centres_of, kmeans_silhouette
from control_plane.fielding.config import FieldingConfig
from control_plane.fielding.representation import l1

log = logging.getLogger(__name__)

ClientId = Hashable
M = TypeVar("M")


@dataclass
class ClusterUpdate:
    """What one :meth:`FieldingClusterer.observe` call changed.

    Attributes
    ----------
    drifted : list
        Clients whose representation moved more than ``tau`` (new clients included).
    migrated : dict
        ``client -> (old cluster, new cluster)`` for individual migrations.
    reclustered : bool
        Whether all clients were re-clustered.
    reason : str
        ``"none"``, ``"initial"``, ``"migration"``, ``"theta"`` or ``"cost"``.
    parents : dict
        For every cluster that is new (or re-created) in this update: the old cluster whose
        model it starts from (``None``: no old cluster, start from the initial model).
    removed : list
        Cluster ids that no longer exist.
    cost_after_migration, cost_fresh : float
        Clustering costs compared by the ``epsilon`` trigger (NaN when not computed).
    """

    drifted: list = field(default_factory=list)
    migrated: dict = field(default_factory=dict)
    reclustered: bool = False
    reason: str = "none"
    parents: dict = field(default_factory=dict)
    removed: list = field(default_factory=list)
    cost_after_migration: float = float("nan")
    cost_fresh: float = float("nan")


class FieldingClusterer:
    """Keeps the clustering of clients up to date as their representations drift."""

    def __init__(self, config: FieldingConfig | None = None) -> None:
        self.config = config or FieldingConfig()
        self.reps: dict[ClientId, np.ndarray] = {}  # latest representation received
        self.ref: dict[ClientId, np.ndarray] = {}  # representation when last clustered
        self.assignment: dict[ClientId, int] = {}
        self.centres: dict[int, np.ndarray] = {}
        self._next_id = 0
        self.history: list[ClusterUpdate] = []
        self._before: tuple[dict, dict] = ({}, {})

    # ----------------------------------------------------------------- queries
    @property
    def clusters(self) -> dict[int, list[ClientId]]:
        """Cluster id -> member client ids (ordered as first seen)."""
        out: dict[int, list[ClientId]] = {cid: [] for cid in self.centres}
        for client, cid in self.assignment.items():
            out.setdefault(cid, []).append(client)
        return out

    def is_drifted(self, client: ClientId, rep: np.ndarray) -> bool:
        """True when ``rep`` is more than ``tau`` (L1) from the client's last clustered one."""
        ref = self.ref.get(client)
        return ref is None or l1(rep, ref) > self.config.tau

    def cost(self) -> float:
        """Sum over clients of the L1 distance to their cluster centre."""
        return float(sum(l1(self.reps[c], self.centres[k]) for c, k in self.assignment.items()))

    # ----------------------------------------------------------------- update
    def observe(self, reps: Mapping[ClientId, np.ndarray]) -> ClusterUpdate:
        """Take the representations reported this round and update the clustering.

        Clients that report nothing keep their last representation (client-side drift
        detection: a client only uploads when :meth:`is_drifted` would say so).
        """
        drifted = [c for c, r in reps.items() if self.is_drifted(c, np.asarray(r, float))]
        for c, r in reps.items():
            self.reps[c] = np.asarray(r, dtype=float)
        update = ClusterUpdate(drifted=drifted)
        # the clustering as it was before this round (re-clustering compares with it)
        self._before = (dict(self.assignment), {k: v.copy() for k, v in self.centres.items()})
        if not drifted:
            self.history.append(update)
            return update
        if not self.centres:
            self._recluster(update, "initial")
        elif len(drifted) / len(self.reps) > self.config.theta:
            self._recluster(update, "theta")
        else:
            self._migrate(update)
        self.history.append(update)
        return update

    def _migrate(self, update: ClusterUpdate) -> None:
        ids = list(self.centres)
        old_centres = np.array([self.centres[k] for k in ids])
        for client in update.drifted:
            dist = np.abs(old_centres - self.reps[client]).sum(axis=1)
            new = ids[int(np.argmin(dist))]
            old = self.assignment.get(client)
            self.assignment[client] = new
            self.ref[client] = self.reps[client]
            if old != new:
                update.migrated[client] = (old, new)
        self._recompute_centres(update)
        update.reason = "migration"
        clients = list(self.reps)
        X = np.array([self.reps[c] for c in clients])
        fresh = kmeans_silhouette(X, self.config.k_max, self.config.kmeans_n_init, self.config.seed)
        update.cost_after_migration = self.cost()
        update.cost_fresh = fresh.cost
        log.info(
            "FIELDING: %d drifted, %d migrated; cost after migration %.4f vs fresh %.4f (K=%d)",
            len(update.drifted), len(update.migrated), update.cost_after_migration,
            fresh.cost, fresh.k,
        )
        if update.cost_after_migration > (1 + self.config.epsilon) * fresh.cost:
            self._recluster(update, "cost", fresh=(clients, fresh))

    def _recompute_centres(self, update: ClusterUpdate) -> None:
        members = self.clusters
        for cid, clients in members.items():
            if clients:
                self.centres[cid] = np.mean([self.reps[c] for c in clients], axis=0)
            else:
                del self.centres[cid]
                update.removed.append(cid)

    def _recluster(self, update: ClusterUpdate, reason: str, fresh=None) -> None:
        cfg = self.config
        if fresh is None:
            clients = list(self.reps)
            X = np.array([self.reps[c] for c in clients])
            fresh = (clients, kmeans_silhouette(X, cfg.k_max, cfg.kmeans_n_init, cfg.seed))
        clients, result = fresh
        X = np.array([self.reps[c] for c in clients])
        centres = centres_of(X, result.labels, result.k)
        old_assignment, old_centres = self._before
        old_ids = list(old_centres)
        # Reuse an old id for the new cluster that holds most of its members (one to one),
        # so that a re-clustering that changes little also changes few ids.
        overlap = np.zeros((result.k, len(old_ids)), dtype=int)
        for i, c in enumerate(clients):
            if old_assignment.get(c) in old_ids:
                overlap[result.labels[i], old_ids.index(old_assignment[c])] += 1
        new_ids: dict[int, int] = {}
        used: set[int] = set()
        for flat in np.argsort(-overlap, axis=None, kind="stable"):
            j, o = divmod(int(flat), max(len(old_ids), 1))
            if not old_ids or overlap[j, o] == 0:
                break
            if j in new_ids or old_ids[o] in used:
                continue
            new_ids[j] = old_ids[o]
            used.add(old_ids[o])
        for j in range(result.k):
            if j not in new_ids:
                new_ids[j] = self._next_id
                self._next_id += 1
        self._next_id = max(self._next_id, *(v + 1 for v in new_ids.values()))
        parents: dict[int, int | None] = {}
        for j in range(result.k):
            if not old_ids:
                parents[new_ids[j]] = None
            elif cfg.init_policy == "fresh":
                parents[new_ids[j]] = new_ids[j] if new_ids[j] in old_ids else None
            elif cfg.init_policy == "nearest-centre":
                d = [l1(centres[j], old_centres[o]) for o in old_ids]
                parents[new_ids[j]] = old_ids[int(np.argmin(d))]
            else:  # max-overlap
                row = overlap[j]
                parents[new_ids[j]] = old_ids[int(np.argmax(row))] if row.any() else None
        self.centres = {new_ids[j]: centres[j] for j in range(result.k)}
        self.assignment = {c: new_ids[int(result.labels[i])] for i, c in enumerate(clients)}
        self.ref = {c: self.reps[c] for c in clients}
        update.reclustered = True
        update.reason = reason
        update.parents = parents
        update.removed = sorted(set(old_ids) - set(self.centres))
        update.migrated = {
            c: (old_assignment.get(c), k)
            for c, k in self.assignment.items()
            if old_assignment.get(c) != k
        }
        log.info(
            "FIELDING: global re-clustering (%s): K=%d, silhouette %.3f, parents %s",
            reason, result.k, result.silhouette, parents,
        )

    def check_consistency(self) -> None:
        """Raise AssertionError if internal state is inconsistent (used by tests)."""
        assert set(self.assignment) == set(self.reps)
        assert set(self.assignment.values()) <= set(self.centres)
        X = {k: np.mean([self.reps[c] for c in m], axis=0) for k, m in self.clusters.items() if m}
        for k, v in X.items():
            assert np.allclose(v, self.centres[k])


def carry_models(
    models: Mapping[int, M],
    update: ClusterUpdate,
    live: set[int],
    init: Callable[[], M],
    copy: Callable[[M], M],
) -> dict[int, M]:
    """Models per cluster after ``update``.

    Clusters listed in ``update.parents`` start from a copy of their parent's model (from
    ``init()`` when there is none); others keep theirs; clusters not in ``live`` are dropped.
    """
    out: dict[int, M] = {}
    for cid in live:
        if cid in update.parents:
            parent = update.parents[cid]
            out[cid] = copy(models[parent]) if parent in models else init()
        elif cid in models:
            out[cid] = models[cid]
        else:
            out[cid] = init()
    return out
