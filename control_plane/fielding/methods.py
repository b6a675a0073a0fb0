"""FIELDING and its baselines as round-by-round methods of the offline harness.

Every method sees the same :class:`Env` (clients, model, local SGD settings), trains with the
same :func:`local_train`, and returns per round the model each client would use, which the
harness scores on that client's test data. Byte counters follow what crosses the network:
models sent to clients (``down``), updates sent back (``up``) and client representations
(``repr``; FIELDING only). Sources of the rules:

* FedAvg: McMahan et al., AISTATS 2017 (one model, sample-weighted mean).
* IFCA: Ghosh et al., NeurIPS 2020 (K models; a client trains the one with the lowest loss).
  K is a parameter of the method, never the scenario's number of groups.
* CFL: Sattler et al., IEEE TNNLS 2020 (bi-partition a cluster by cosine similarity of
  updates when the mean update norm < eps1 and the max update norm > eps2).
* FedDrift: Jothimurugesan et al., AISTATS 2023 (a client is drifted when its best loss on new
  data exceeds its loss before by delta; drifted clients start new clusters; clusters i, j merge
  while max(L_i(w_j) - L_i(w_i), L_j(w_i) - L_j(w_j), 0) < delta).
* Oracle: one model per true group (knows the groups, not the models).
* FIELDING: :class:`control_plane.fielding.clusterer.FieldingClusterer`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage

from control_plane.fielding.clusterer import FieldingClusterer, carry_models
from control_plane.fielding.config import FieldingConfig
from control_plane.fielding.models import LocalTraining, Model, local_train, weighted_mean
from control_plane.fielding.representation import (
    client_representation,
    l1,
    representation_bytes,
)
from control_plane.fielding.scenarios import ClientData, Scenario

log = logging.getLogger(__name__)


@dataclass
class Env:
    """What a method may use: current client data, the model family, SGD settings, RNG."""

    scenario: Scenario
    model: Model
    local: LocalTraining
    rng: np.random.Generator
    round: int = 0

    @property
    def n_clients(self) -> int:
        return self.scenario.n_clients

    def data(self, c: int) -> ClientData:
        return self.scenario.data(c, self.round)

    def train(self, c: int, w: np.ndarray) -> tuple[np.ndarray, int]:
        d = self.data(c)
        return local_train(self.model, w, d.X_train, d.y_train, self.local, self.rng), len(
            d.y_train
        )

    def loss(self, c: int, w: np.ndarray) -> float:
        d = self.data(c)
        return self.model.loss(w, d.X_train, d.y_train)


@dataclass
class Bytes:
    """Bytes on the wire, summed over rounds."""

    down: int = 0
    up: int = 0
    repr: int = 0


@dataclass
class Method:
    """Base class: ``start`` once, then ``round`` returns client -> model used by it."""

    name: str = "method"
    bytes: Bytes = field(default_factory=Bytes)
    params: dict = field(default_factory=dict)

    def start(self, env: Env) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def round(self, env: Env) -> dict[int, np.ndarray]:  # pragma: no cover - interface
        raise NotImplementedError

    def n_models(self) -> int:
        return 1


def _fedavg_groups(env: Env, groups: dict, models: dict) -> tuple[dict, dict]:
    """Train every member of every group from its group's model; FedAvg per group.

    Returns the new models and each client's local update (new local - start).
    """
    new_models, updates = {}, {}
    for g, members in groups.items():
        if not members:
            continue
        ws, ns = [], []
        for c in members:
            w, n = env.train(c, models[g])
            ws.append(w)
            ns.append(n)
            updates[c] = w - models[g]
        new_models[g] = weighted_mean(ws, ns)
    return new_models, updates


class FedAvg(Method):
    """One global model."""

    def __init__(self) -> None:
        super().__init__(name="fedavg")

    def start(self, env: Env) -> None:
        self.w = env.model.init(env.rng)

    def round(self, env: Env) -> dict[int, np.ndarray]:
        clients = list(range(env.n_clients))
        models, _ = _fedavg_groups(env, {0: clients}, {0: self.w})
        self.w = models[0]
        self.bytes.down += env.n_clients * env.model.nbytes
        self.bytes.up += env.n_clients * env.model.nbytes
        return {c: self.w for c in clients}


class Oracle(Method):
    """One model per true group; a group seen for the first time starts from scratch."""

    def __init__(self) -> None:
        super().__init__(name="oracle")

    def start(self, env: Env) -> None:
        self.models: dict[int, np.ndarray] = {}
        self.init = env.model.init(env.rng)

    def round(self, env: Env) -> dict[int, np.ndarray]:
        groups: dict[int, list[int]] = {}
        for c in range(env.n_clients):
            groups.setdefault(env.data(c).spec, []).append(c)
        for g in groups:
            self.models.setdefault(g, self.init.copy())
        new, _ = _fedavg_groups(env, groups, self.models)
        self.models.update(new)
        self.bytes.down += env.n_clients * env.model.nbytes
        self.bytes.up += env.n_clients * env.model.nbytes
        return {c: self.models[g] for g, m in groups.items() for c in m}

    def n_models(self) -> int:
        return len(self.models)


class IFCA(Method):
    """K models, randomly initialised; each client trains the model with its lowest loss."""

    def __init__(self, k: int, init_scale: float = 0.1, name: str = "ifca") -> None:
        if k < 1:
            raise ValueError(f"ifca k={k}: must be >= 1 (try 4)")
        super().__init__(name=name, params={"k": k, "init_scale": init_scale})
        self.k = k
        self.init_scale = init_scale

    def start(self, env: Env) -> None:
        base = env.model.init(env.rng)
        self.models = {
            j: base + self.init_scale * env.rng.standard_normal(env.model.size)
            for j in range(self.k)
        }

    def round(self, env: Env) -> dict[int, np.ndarray]:
        choice = {
            c: min(self.models, key=lambda j, c=c: env.loss(c, self.models[j]))
            for c in range(env.n_clients)
        }
        groups: dict[int, list[int]] = {j: [] for j in self.models}
        for c, j in choice.items():
            groups[j].append(c)
        new, _ = _fedavg_groups(env, groups, self.models)
        self.models.update(new)
        self.bytes.down += env.n_clients * self.k * env.model.nbytes
        self.bytes.up += env.n_clients * env.model.nbytes
        return {c: self.models[j] for c, j in choice.items()}

    def n_models(self) -> int:
        return self.k


class CFL(Method):
    """Sattler's clustered FL: recursive bi-partitioning by update cosine similarity."""

    def __init__(self, eps1: float, eps2: float, min_size: int = 2, warmup: int = 3) -> None:
        super().__init__(
            name="cfl",
            params={"eps1": eps1, "eps2": eps2, "min_size": min_size, "warmup": warmup},
        )
        self.eps1, self.eps2, self.min_size, self.warmup = eps1, eps2, min_size, warmup

    def start(self, env: Env) -> None:
        self.clusters: list[list[int]] = [list(range(env.n_clients))]
        self.models: list[np.ndarray] = [env.model.init(env.rng)]
        self.age = [0]
        self.splits: list[int] = []

    def round(self, env: Env) -> dict[int, np.ndarray]:
        groups = dict(enumerate(self.clusters))
        new, updates = _fedavg_groups(env, groups, dict(enumerate(self.models)))
        self.bytes.down += env.n_clients * env.model.nbytes
        self.bytes.up += env.n_clients * env.model.nbytes
        out_clusters, out_models, out_age = [], [], []
        for g, members in groups.items():
            w = new[g]
            self.age[g] += 1
            U = np.stack([updates[c] for c in members])
            ns = np.array([len(env.data(c).y_train) for c in members], dtype=float)
            mean_norm = float(np.linalg.norm((U * ns[:, None]).sum(0) / ns.sum()))
            max_norm = float(np.linalg.norm(U, axis=1).max())
            if (
                self.age[g] >= self.warmup
                and len(members) >= 2 * self.min_size
                and mean_norm < self.eps1
                and max_norm > self.eps2
            ):
                Un = U / np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-12)
                dist = np.clip(1.0 - Un @ Un.T, 0.0, 2.0)
                iu = np.triu_indices(len(members), 1)
                labels = fcluster(linkage(dist[iu], method="complete"), 2, "maxclust")
                parts = [[c for c, lab in zip(members, labels, strict=True) if lab == k]
                         for k in (1, 2)]
                if all(len(p) >= self.min_size for p in parts):
                    log.info("CFL split %d -> %s", len(members), [len(p) for p in parts])
                    self.splits.append(env.round)
                    for p in parts:
                        out_clusters.append(p)
                        out_models.append(w.copy())
                        out_age.append(0)
                    continue
            out_clusters.append(members)
            out_models.append(w)
            out_age.append(self.age[g])
        self.clusters, self.models, self.age = out_clusters, out_models, out_age
        return {c: self.models[g] for g, m in enumerate(self.clusters) for c in m}

    def n_models(self) -> int:
        return len(self.models)


class FedDrift(Method):
    """FedDrift: loss-based drift detection, new clusters for drifted clients, merging by delta.

    ``start="global"`` (the published start): every client begins in one global cluster and
    only clients whose loss jumps later get clusters of their own. ``start="clusters"``: round
    1 treats every client as drifted (its data are new), so the initial non-IID groups can
    form by merging instead of starting from one global model (an advantage the paper's
    FedDrift does not have).
    """

    STARTS = ("global", "clusters")

    def __init__(self, delta: float, start: str = "clusters") -> None:
        if start not in self.STARTS:
            raise ValueError(f"feddrift start={start!r}: choose one of {self.STARTS}")
        if not delta > 0:
            raise ValueError(f"feddrift delta={delta}: must be > 0 (try 0.3)")
        super().__init__(name="feddrift", params={"delta": delta, "start": start})
        self.delta = delta
        self.start_mode = start

    def start(self, env: Env) -> None:
        self.init = env.model.init(env.rng)
        self.models: dict[int, np.ndarray] = {}
        self.assign: dict[int, int] = {}
        self.prev_loss: dict[int, float] = {}
        self.next_id = 0
        self.merges = 0

    def _new_cluster(self, w: np.ndarray) -> int:
        self.models[self.next_id] = w.copy()
        self.next_id += 1
        return self.next_id - 1

    def round(self, env: Env) -> dict[int, np.ndarray]:
        n = env.n_clients
        # Drift detection and assignment on the new data (clients receive all models).
        first = not self.models
        if not first:
            self.bytes.down += n * len(self.models) * env.model.nbytes
        if first and self.start_mode == "global":
            k0 = self._new_cluster(self.init)
        for c in range(n):
            if first:
                self.assign[c] = k0 if self.start_mode == "global" else self._new_cluster(
                    self.init)
                continue
            losses = {k: env.loss(c, w) for k, w in self.models.items()}
            best = min(losses, key=losses.get)
            if c in self.prev_loss and losses[best] > self.prev_loss[c] + self.delta:
                self.assign[c] = self._new_cluster(self.init)
            elif c in self.prev_loss:
                self.assign[c] = best
        groups: dict[int, list[int]] = {}
        for c, k in self.assign.items():
            groups.setdefault(k, []).append(c)
        self.models = {k: self.models[k] for k in groups}
        new, _ = _fedavg_groups(env, groups, self.models)
        self.models = new
        self.bytes.up += n * env.model.nbytes
        self._merge(env, groups)
        groups = {}
        for c, k in self.assign.items():
            groups.setdefault(k, []).append(c)
        self.prev_loss = {c: env.loss(c, self.models[k]) for c, k in self.assign.items()}
        return {c: self.models[k] for c, k in self.assign.items()}

    def _merge(self, env: Env, groups: dict[int, list[int]]) -> None:
        members = {k: list(v) for k, v in groups.items()}

        def cluster_loss(i: int, w: np.ndarray) -> float:
            ls = [env.loss(c, w) for c in members[i]]
            ns = [len(env.data(c).y_train) for c in members[i]]
            return float(np.average(ls, weights=ns))

        ids = list(members)
        L = {(i, j): cluster_loss(i, self.models[j]) for i in ids for j in ids}
        while len(ids) > 1:
            best, pair = None, None
            for a in range(len(ids)):
                for b in range(a + 1, len(ids)):
                    i, j = ids[a], ids[b]
                    d = max(L[i, j] - L[i, i], L[j, i] - L[j, j], 0.0)
                    if best is None or d < best:
                        best, pair = d, (i, j)
            if best is None or best >= self.delta:
                break
            i, j = pair
            ni = sum(len(env.data(c).y_train) for c in members[i])
            nj = sum(len(env.data(c).y_train) for c in members[j])
            self.models[i] = weighted_mean([self.models[i], self.models[j]], [ni, nj])
            members[i] += members.pop(j)
            del self.models[j]
            for c in members[i]:
                self.assign[c] = i
            ids.remove(j)
            self.merges += 1
            for k in ids:
                L[i, k] = cluster_loss(i, self.models[k])
                L[k, i] = cluster_loss(k, self.models[i])

    def n_models(self) -> int:
        return len(self.models)


class Fielding(Method):
    """FIELDING: representation-based clustering with migration and selective re-clustering.

    Drift is detected on the client: a client uploads its representation only when it moved
    more than ``tau`` (L1) from the one it last uploaded (which is the one the server last
    clustered it with), and otherwise sends a one-byte "no drift" flag.
    """

    def __init__(self, config: FieldingConfig) -> None:
        super().__init__(name="fielding", params=config.as_dict())
        self.config = config

    def start(self, env: Env) -> None:
        self.config.log(log)
        self.clusterer = FieldingClusterer(self.config)
        self.models: dict[int, np.ndarray] = {}
        self.init = env.model.init(env.rng)
        self.last_upload: dict[int, np.ndarray] = {}
        self.rep_bytes = representation_bytes(env.scenario.n_classes, self.config)
        self.events: list[dict] = []

    def round(self, env: Env) -> dict[int, np.ndarray]:
        uploads = {}
        for c in range(env.n_clients):
            d = env.data(c)
            rep = client_representation(d.X_train, d.y_train, env.scenario.n_classes, self.config)
            prev = self.last_upload.get(c)
            if prev is None or l1(rep, prev) > self.config.tau:
                uploads[c] = rep
                self.last_upload[c] = rep
                self.bytes.repr += self.rep_bytes
            else:
                self.bytes.repr += 1
        update = self.clusterer.observe(uploads)
        if update.drifted:
            self.events.append({
                "round": env.round, "drifted": len(update.drifted),
                "migrated": len(update.migrated), "reason": update.reason,
                "k": len(self.clusterer.centres),
            })
        self.models = carry_models(
            self.models, update, set(self.clusterer.centres),
            init=lambda: self.init.copy(), copy=np.copy,
        )
        groups = self.clusterer.clusters
        new, _ = _fedavg_groups(env, groups, self.models)
        self.models.update(new)
        self.bytes.down += env.n_clients * env.model.nbytes
        self.bytes.up += env.n_clients * env.model.nbytes
        return {c: self.models[k] for c, k in self.clusterer.assignment.items()}

    def n_models(self) -> int:
        return len(self.models)
