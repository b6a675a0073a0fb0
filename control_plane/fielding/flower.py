"""FIELDING as a Flower (>= 1.20, message API) ``Strategy`` that keeps one model per cluster.

Flower's ``Strategy.start`` loop carries one ``ArrayRecord`` between rounds. This strategy packs
every cluster's model into that record under the key prefix ``c<cluster id>/`` (see
:func:`pack` / :func:`unpack`), so the stock loop, checkpoints and ``Result.arrays`` keep working.
Each round:

1. ``configure_train`` sends a ``query.fielding_representation`` message to every node; a
   client answers with its representation only when it moved more than ``tau`` since it last
   reported (client-side drift detection), else with an empty reply;
2. :class:`~control_plane.fielding.clusterer.FieldingClusterer` migrates or re-clusters;
   models of new clusters start from the nearest old cluster's model;
3. each node gets its cluster's model in a ``train`` message (config key ``cluster-id``);
4. ``aggregate_train`` does FedAvg per cluster, weighted by ``num-examples`` -- or, with
   ``network=`` (:class:`~control_plane.fielding.flower_network.InNetworkAggregation`), each
   cluster's updates are summed by that cluster's THC job in the switch and the server gets
   one sum per cluster instead of every update.

The matching client side is :func:`make_client_app`. :class:`LocalGrid` runs real ``ClientApp``
objects in-process so that Flower's own ``Strategy.start`` can drive a whole run without a
simulation backend; :func:`run_engine` runs the same strategy and clients on Flower's
simulation engine (``flwr.simulation.run_simulation``), which needs Ray.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from itertools import count

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from control_plane.fielding.config import FieldingConfig
from control_plane.fielding.representation import client_representation, l1

log = logging.getLogger(__name__)

QUERY_REPRESENTATION = "query.fielding_representation"
REPR_KEY = "representation"
#: metric record of a query reply carrying the node's ``partition-id``
NODE_KEY = "node"


# --------------------------------------------------------------------------- packing
def pack(models: dict[int, dict[str, np.ndarray]]) -> ArrayRecord:
    """One ``ArrayRecord`` holding every cluster's arrays under ``c<id>/<name>``."""
    arrays = {}
    for cid in sorted(models):
        for name, value in models[cid].items():
            arrays[f"c{cid}/{name}"] = Array(np.asarray(value))
    return ArrayRecord(array_dict=arrays)


def unpack(record: ArrayRecord) -> dict[int, dict[str, np.ndarray]] | None:
    """Inverse of :func:`pack`; ``None`` when ``record`` is a plain (unpacked) model."""
    keys = list(record.keys())
    if not keys or not all(k.startswith("c") and "/" in k for k in keys):
        return None
    out: dict[int, dict[str, np.ndarray]] = {}
    for key in keys:
        head, name = key.split("/", 1)
        try:
            cid = int(head[1:])
        except ValueError:
            return None
        out.setdefault(cid, {})[name] = record[key].numpy()
    return out


def _to_dict(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: record[k].numpy() for k in record}


def _to_record(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord(array_dict={k: Array(np.asarray(v)) for k, v in arrays.items()})


# --------------------------------------------------------------------------- strategy
class FieldingStrategy(Strategy):
    """Clustered FedAvg whose clusters FIELDING maintains under drift.

    Parameters
    ----------
    config : FieldingConfig
        Clustering knobs (logged by :meth:`summary`); the representation knobs are also sent
        to clients so that they compute the representation the server expects.
    weighted_by_key : str
        Metric key with the sample count of a reply (FedAvg weight).
    arrayrecord_key, configrecord_key : str
        Keys of the model and config records in messages (as Flower's FedAvg).
    query_timeout : float
        Seconds to wait for representation replies.
    min_available_nodes : int
        Wait until this many nodes are connected before the first query (as Flower's
        ``sample_nodes``). Every connected node takes part in every round.
    network : InNetworkAggregation, optional
        In-network aggregation (:mod:`control_plane.fielding.flower_network`): before each
        train round the controller installs one THC job per cluster, every node's train
        message names its job, and the cluster's sum comes back from one member.
    """

    def __init__(
        self,
        config: FieldingConfig | None = None,
        weighted_by_key: str = "num-examples",
        arrayrecord_key: str = "arrays",
        configrecord_key: str = "config",
        query_timeout: float = 600.0,
        min_available_nodes: int = 2,
        network=None,
    ) -> None:
        self.config = config or FieldingConfig()
        self.weighted_by_key = weighted_by_key
        self.arrayrecord_key = arrayrecord_key
        self.configrecord_key = configrecord_key
        self.query_timeout = query_timeout
        self.min_available_nodes = min_available_nodes
        # server side only: a ClientApp process (one per message on the deployment engine)
        # need not load scikit-learn's clustering
        from control_plane.fielding.clusterer import FieldingClusterer

        self.clusterer = FieldingClusterer(self.config)
        self.models: dict[int, dict[str, np.ndarray]] = {}
        self.initial: dict[str, np.ndarray] | None = None
        self.sent_to: dict[int, int] = {}  # node id -> cluster id of this round's train message
        self.representation_bytes = 0
        self.updates = []  # ClusterUpdate per round
        self.network = network
        #: node id -> the ``partition-id`` its node config gives (sent with every query reply)
        self.partitions: dict[int, int] = {}
        #: per round: nodes whose train reply arrived without error
        self.trained: list[list[int]] = []
        #: per round: serialized size (Flower's protobuf ``Message``) of the train replies the
        #: ServerApp received, and of the model arrays in them
        self.train_reply_bytes: list[int] = []
        self.train_array_bytes: list[int] = []

    def summary(self) -> None:
        """Log every FIELDING parameter."""
        self.config.log(log)
        log.info("FieldingStrategy: weighted by %r, arrays key %r, config key %r",
                 self.weighted_by_key, self.arrayrecord_key, self.configrecord_key)

    # ------------------------------------------------------------------- helpers
    def _query_config(self, server_round: int) -> ConfigRecord:
        c = self.config
        return ConfigRecord({
            "server-round": server_round, "tau": c.tau, "representation": c.representation,
            "embed-dim": c.embed_dim, "embed-weight": c.embed_weight,
            "embed-seed": c.embed_seed,
        })

    def _adopt(self, arrays: ArrayRecord) -> None:
        packed = unpack(arrays)
        if packed is None:
            if self.initial is None:
                self.initial = _to_dict(arrays)
        else:
            self.models = packed

    def _collect_representations(self, server_round: int, grid: Grid) -> dict[int, np.ndarray]:
        while len(nodes := list(grid.get_node_ids())) < self.min_available_nodes:
            log.info("waiting for nodes: %d of %d connected", len(nodes),
                     self.min_available_nodes)
            time.sleep(1)
        cfg = self._query_config(server_round)
        msgs = [
            Message(RecordDict({self.configrecord_key: cfg}), dst_node_id=n,
                    message_type=QUERY_REPRESENTATION)
            for n in nodes
        ]
        reps: dict[int, np.ndarray] = {}
        for reply in grid.send_and_receive(msgs, timeout=self.query_timeout):
            if reply.has_error():
                log.warning("node %d: no representation (%s)", reply.metadata.src_node_id,
                            reply.error.reason)
                continue
            node_rec = reply.content.metric_records.get(NODE_KEY)
            if node_rec is not None and "partition-id" in node_rec:
                self.partitions[reply.metadata.src_node_id] = int(node_rec["partition-id"])
            rec = reply.content.array_records.get(REPR_KEY)
            if rec is not None and "rep" in rec:
                reps[reply.metadata.src_node_id] = rec["rep"].numpy()
                self.representation_bytes += rec["rep"].numpy().astype(np.float32).nbytes
            else:
                self.representation_bytes += 1
        return reps

    def _cluster_messages(
        self, server_round: int, config: ConfigRecord, message_type: str,
        extra: dict[int, dict] | None = None,
    ) -> list[Message]:
        msgs = []
        self.sent_to = {}
        for node, cid in self.clusterer.assignment.items():
            cfg = ConfigRecord({**dict(config), "server-round": server_round,
                                "cluster-id": int(cid), **(extra or {}).get(int(node), {})})
            content = RecordDict({self.arrayrecord_key: _to_record(self.models[cid]),
                                  self.configrecord_key: cfg})
            msgs.append(Message(content, dst_node_id=int(node), message_type=message_type))
            self.sent_to[int(node)] = int(cid)
        return msgs

    # ------------------------------------------------------------------- training
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Query representations, update the clustering, send each node its cluster's model."""
        self._adopt(arrays)
        reps = self._collect_representations(server_round, grid)
        update = self.clusterer.observe(reps)
        self.updates.append(update)
        initial = self.initial
        if initial is None:
            raise ValueError("FieldingStrategy: start() needs initial arrays (a plain model)")
        from control_plane.fielding.clusterer import carry_models

        self.models = carry_models(
            self.models, update, set(self.clusterer.centres),
            init=lambda: {k: v.copy() for k, v in initial.items()},
            copy=lambda m: {k: v.copy() for k, v in m.items()},
        )
        log.info("round %d: %d clusters, %d drifted, %s", server_round,
                 len(self.models), len(update.drifted), update.reason)
        extra = None
        if self.network is not None:
            extra = self.network.install(self.clusterer.clusters, self.partitions, server_round)
        return self._cluster_messages(server_round, config, MessageType.TRAIN, extra)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """FedAvg per cluster (weighted by ``num-examples``); returns the packed models."""
        from flwr.common.serde import message_to_proto

        replies = list(replies)
        self.train_reply_bytes.append(sum(message_to_proto(r).ByteSize() for r in replies))
        self.train_array_bytes.append(sum(_payload_bytes(r) for r in replies))
        self.trained.append(sorted(r.metadata.src_node_id for r in replies if not r.has_error()))
        if self.network is not None:
            return self._aggregate_in_network(replies)
        per_cluster: dict[int, list[tuple[dict[str, np.ndarray], float]]] = {}
        metrics: list[tuple[MetricRecord, float]] = []
        for node, cid, content, mrec, n in self._train_replies(replies):
            if self.arrayrecord_key not in content.array_records:
                log.warning("ignoring reply from node %d (no model in it)", node)
                continue
            per_cluster.setdefault(cid, []).append((_to_dict(content[self.arrayrecord_key]), n))
            metrics.append((mrec, n))
        if not per_cluster:
            return None, None
        for cid, items in per_cluster.items():
            total = sum(n for _, n in items)
            self.models[cid] = {
                k: sum(a[k] * (n / total) for a, n in items) for k in items[0][0]
            }
        agg = _weighted_metrics(metrics, self.weighted_by_key)
        agg["clusters"] = len(self.models)
        return pack(self.models), agg

    def _train_replies(self, replies: Iterable[Message]):
        """``(node, cluster id, content, metrics, weight)`` of each train reply that counts:
        errors and nodes not sent a model this round are skipped (logged); a reply without a
        positive ``num-examples`` is a ValueError."""
        for reply in replies:
            node = reply.metadata.src_node_id
            if reply.has_error():
                log.warning("node %d failed: %s", node, reply.error.reason)
                continue
            cid = self.sent_to.get(node)
            if cid is None:
                log.warning("ignoring reply from node %d (not sent a model this round)", node)
                continue
            mrec = next(iter(reply.content.metric_records.values()), MetricRecord())
            n = float(mrec.get(self.weighted_by_key, 0))
            if n <= 0:
                raise ValueError(f"reply from node {node} lacks a positive "
                                 f"'{self.weighted_by_key}' metric (FedAvg weight)")
            yield node, cid, reply.content, mrec, n

    def _aggregate_in_network(
        self, replies: list[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Each cluster's new model from the one sum its THC job returned (FedAvg weights from
        every member's ``num-examples`` metric)."""
        metrics: list[tuple[MetricRecord, float]] = []
        weights: dict[int, float] = {}
        sums: dict[int, dict[str, np.ndarray]] = {}
        for _, cid, content, mrec, n in self._train_replies(replies):
            weights[cid] = weights.get(cid, 0.0) + n
            metrics.append((mrec, n))
            if self.arrayrecord_key in content.array_records:
                sums[cid] = _to_dict(content[self.arrayrecord_key])
        if not metrics:
            return None, None
        self.models = self.network.apply(self.models, sums, weights, self.sent_to)
        agg = _weighted_metrics(metrics, self.weighted_by_key)
        agg["clusters"] = len(self.models)
        return pack(self.models), agg

    # ------------------------------------------------------------------- evaluation
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Each node evaluates its own cluster's model."""
        self._adopt(arrays)
        return self._cluster_messages(server_round, config, MessageType.EVALUATE)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Sample-weighted mean of the reply metrics."""
        metrics = []
        for reply in replies:
            if reply.has_error():
                continue
            mrec = next(iter(reply.content.metric_records.values()), None)
            if mrec is not None and mrec.get(self.weighted_by_key, 0) > 0:
                metrics.append((mrec, float(mrec[self.weighted_by_key])))
        return _weighted_metrics(metrics, self.weighted_by_key) if metrics else None


def _weighted_metrics(items: list[tuple[MetricRecord, float]], weight_key: str) -> MetricRecord:
    total = sum(n for _, n in items)
    keys = {k for m, _ in items for k, v in m.items()
            if k != weight_key and isinstance(v, int | float)}
    out = {k: sum(float(m.get(k, 0.0)) * n for m, n in items) / total for k in sorted(keys)}
    out[weight_key] = int(total)
    return MetricRecord(out)


# --------------------------------------------------------------------------- client side
def make_client_app(
    data_fn: Callable[[Context, int], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    n_classes: int,
    hidden: int = 0,
    epochs: int = 3,
    lr: float = 0.5,
) -> ClientApp:
    """A ``ClientApp`` training the numpy model of :mod:`control_plane.fielding.models`.

    ``data_fn(context, server_round)`` returns ``(X_train, y_train, X_test, y_test)`` of the
    node at that round (so a simulation can make its data drift). The model travels as one
    array ``"w"``.
    """
    from control_plane.fielding.models import LocalTraining, Model, local_train

    app = ClientApp()

    def model_for(X: np.ndarray) -> Model:
        return Model(X.shape[1], n_classes, hidden)

    @app.query("fielding_representation")
    def query(msg: Message, context: Context) -> Message:
        cfg = msg.content["config"]
        rnd = int(cfg["server-round"])
        X, y, _, _ = data_fn(context, rnd)
        fc = FieldingConfig(tau=float(cfg["tau"]), representation=str(cfg["representation"]),
                            embed_dim=int(cfg["embed-dim"]),
                            embed_weight=float(cfg["embed-weight"]),
                            embed_seed=int(cfg["embed-seed"]))
        rep = client_representation(X, y, n_classes, fc)
        last = context.state.array_records.get("fielding-last")
        content = RecordDict({NODE_KEY: MetricRecord(
            {"partition-id": int(context.node_config.get("partition-id", -1))})})
        if last is None or l1(rep, last["rep"].numpy()) > fc.tau:
            record = ArrayRecord(array_dict={"rep": Array(rep.astype(np.float32))})
            context.state["fielding-last"] = record
            content[REPR_KEY] = ArrayRecord(array_dict={"rep": Array(rep.astype(np.float32))})
        else:
            content["drift"] = MetricRecord({"drifted": 0})
        return Message(content, reply_to=msg)

    def round_data(msg: Message, context: Context) -> tuple:
        """The round, this client's data of it (train X, y, test X, y) and the model's weights."""
        rnd = int(msg.content["config"]["server-round"])
        return (rnd, *data_fn(context, rnd), msg.content["arrays"]["w"].numpy().astype(float))

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        rnd, X, y, _, _, w = round_data(msg, context)
        model = model_for(X)
        w_new = local_train(model, w, X, y, LocalTraining(epochs=epochs, lr=lr),
                            np.random.default_rng(train_seed(context, rnd)))
        metrics = MetricRecord({"train_loss": model.loss(w_new, X, y), "num-examples": len(y)})
        cfg = msg.content["config"]
        if "job-id" in cfg:  # in-network: the cluster's THC job sums the updates
            from control_plane.fielding.flower_network import network_train

            total = network_train(cfg, context.node_config, len(y) * (w_new - w))
            content = RecordDict({"metrics": metrics})
            if total is not None:
                content["arrays"] = ArrayRecord(array_dict={"w": Array(total)})
            return Message(content, reply_to=msg)
        content = RecordDict({"arrays": ArrayRecord(array_dict={"w": Array(w_new)}),
                              "metrics": metrics})
        return Message(content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        _, _, _, Xt, yt, w = round_data(msg, context)
        model = model_for(Xt)
        content = RecordDict({"metrics": MetricRecord({
            "eval_loss": model.loss(w, Xt, yt), "eval_acc": model.accuracy(w, Xt, yt),
            "num-examples": len(yt),
        })})
        return Message(content, reply_to=msg)

    return app


def train_seed(context: Context, server_round: int) -> int:
    """Seed of a node's local training in a round: from its ``partition-id`` (stable across
    engines and runs; the node id, which the SuperLink draws at random, when there is none)."""
    pid = int(context.node_config.get("partition-id", -1))
    return (pid if pid >= 0 else int(context.node_id)) * 1000 + server_round


# --------------------------------------------------------------------------- in-process grid
def set_task_identity(run_id: int = 1) -> None:
    """Set the process-wide identity Flower stamps on messages (a ServerApp process sets it)."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.task_id = 1
    TaskIdentity.run_id = run_id
    TaskIdentity.node_id = SUPERLINK_NODE_ID


class LocalGrid(Grid):
    """A ``Grid`` that delivers messages to in-process ``ClientApp`` objects.

    One persistent ``Context`` per node (``node_config["partition-id"]`` = its index), as
    Flower's simulation runtime gives. Replies get message ids like the SuperLink assigns.
    """

    def __init__(self, client_app: ClientApp, n_nodes: int, run_id: int = 1,
                 first_node_id: int = 100) -> None:
        set_task_identity(run_id)
        self.client_app = client_app
        self._ids = count(1)
        self.node_ids = [first_node_id + i for i in range(n_nodes)]
        self.contexts = {
            nid: Context(run_id=run_id, node_id=nid,
                         node_config={"partition-id": i, "num-partitions": n_nodes},
                         state=RecordDict(), run_config={})
            for i, nid in enumerate(self.node_ids)
        }
        self._pending: dict[str, Message] = {}
        self._run = None
        self.bytes_to_clients = 0
        self.bytes_from_clients = 0

    def set_run(self, run) -> None:  # pragma: no cover - not used in-process
        self._run = run

    @property
    def run(self):  # pragma: no cover - not used in-process
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id=dst_node_id, message_type=message_type,
                       group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ids)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            mid = f"m{next(self._ids)}"
            msg.metadata.__dict__["_message_id"] = mid
            self.bytes_to_clients += _payload_bytes(msg)
            reply = self.client_app(msg, self.contexts[msg.metadata.dst_node_id])
            reply.metadata.__dict__["_message_id"] = f"r{mid}"
            self.bytes_from_clients += _payload_bytes(reply)
            self._pending[mid] = reply
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._pending.pop(m) for m in message_ids if m in self._pending]

    def send_and_receive(self, messages: Iterable[Message], *, timeout=None):
        return self.pull_messages(self.push_messages(messages))


def _payload_bytes(msg: Message) -> int:
    if msg.has_error():
        return 0
    return sum(
        arr.numpy().nbytes for rec in msg.content.array_records.values() for arr in rec.values()
    )


def _scenario_app(kind: str, n_clients: int, rounds: int, seed: int):
    from control_plane.fielding.models import Model
    from control_plane.fielding.scenarios import make_scenario

    sc = make_scenario(kind, "digits", n_clients, rounds, seed)

    def data_fn(context: Context, rnd: int):
        d = sc.data(int(context.node_config["partition-id"]), rnd)
        return d.X_train, d.y_train, d.X_test, d.y_test

    model = Model(sc.n_features, sc.n_classes)
    init = ArrayRecord(array_dict={"w": Array(model.init(np.random.default_rng(seed)))})
    return sc, make_client_app(data_fn, sc.n_classes), init


def _summary(result, sc, strategy: FieldingStrategy, rounds: int) -> dict:
    acc = [float(result.evaluate_metrics_clientapp[r]["eval_acc"]) for r in range(1, rounds + 1)]
    clusters = [int(result.train_metrics_clientapp[r]["clusters"]) for r in range(1, rounds + 1)]
    return {
        "scenario": sc.kind, "clients": sc.n_clients, "rounds": rounds, "seed": sc.seed,
        "drift_rounds": sc.events, "accuracy": acc, "clusters": clusters,
        "representation_bytes": strategy.representation_bytes,
        "reclusterings": [u.reason for u in strategy.updates if u.reclustered],
        "trained_per_round": [len(t) for t in strategy.trained],
        "trained_nodes": len({n for t in strategy.trained for n in t}),
        "train_reply_bytes": strategy.train_reply_bytes,
        "train_array_bytes": strategy.train_array_bytes,
    }


def run_local(kind: str = "concept", n_clients: int = 20, rounds: int = 12, seed: int = 0,
              config: FieldingConfig | None = None) -> dict:
    """Run :class:`FieldingStrategy` with Flower's ``Strategy.start`` over a :class:`LocalGrid`.

    Clients hold the data of a :func:`~control_plane.fielding.scenarios.make_scenario`
    scenario (drift included). Returns accuracy per round and clusters per round.
    """
    sc, app, init = _scenario_app(kind, n_clients, rounds, seed)
    grid = LocalGrid(app, n_clients)
    strategy = FieldingStrategy(config)
    result = strategy.start(grid=grid, initial_arrays=init, num_rounds=rounds)
    out = _summary(result, sc, strategy, rounds)
    out |= {"bytes_to_clients": grid.bytes_to_clients,
            "bytes_from_clients": grid.bytes_from_clients,
            "engine": "flwr Strategy.start over an in-process Grid (no Ray)"}
    return out


def run_engine(kind: str = "concept", n_clients: int = 10, rounds: int = 6, seed: int = 0,
               config: FieldingConfig | None = None, num_cpus: int = 2) -> dict:
    """Run the same job on Flower's simulation engine (``run_simulation``; needs Ray).

    The ``ServerApp`` runs :class:`FieldingStrategy` with ``Strategy.start`` on the engine's
    grid; every virtual SuperNode runs :func:`make_client_app` in a Ray actor.
    """
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            "Flower's simulation engine needs Ray (pip install 'flwr[simulation]'); "
            "use run_local() for the in-process grid"
        ) from exc
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    sc, client_app, init = _scenario_app(kind, n_clients, rounds, seed)
    box: dict = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FieldingStrategy(config, min_available_nodes=n_clients)
        result = strategy.start(grid=grid, initial_arrays=init, num_rounds=rounds)
        box["out"] = _summary(result, sc, strategy, rounds)

    run_simulation(
        server_app=server_app, client_app=client_app, num_supernodes=n_clients,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                        "init_args": {"num_cpus": num_cpus, "include_dashboard": False}},
    )
    if "out" not in box:
        raise RuntimeError("the Flower simulation ended without a result (see its log)")
    return box["out"] | {"engine": "flwr.simulation.run_simulation (Ray backend)"}
