"""In-network FL aggregation for :class:`~control_plane.fielding.flower.FieldingStrategy`.

Every FIELDING cluster is one THC aggregation job (:mod:`control_plane.fielding.network`).
In a Flower round with in-network aggregation

1. before the train messages go out, :meth:`InNetworkAggregation.install` has the controller
   reconcile the switches to the current clustering (one job per cluster: a migration or a
   re-clustering moves clients between jobs, and only the affected entries are written), and
   names each node's job, rank, world, slot range, token and a fresh session round base in
   its train message (config keys ``job-id``, ``rank``, ...);
2. each client trains, and sends ``n_i * (w_i - w)`` (its update, weighted by its sample
   count) through its cluster's job with :func:`network_train`: the switch sums the members'
   THC-encoded updates and multicasts the sum back; rank 0 of the job replies to the server
   with the sum, the others with their metrics only;
3. :meth:`InNetworkAggregation.apply` turns each cluster's sum into its new model,
   ``w + sum / sum_i n_i``: FedAvg weighted by ``num-examples``, within THC's error.

The server receives one model-sized array per cluster instead of one per client. The switch
is the software target (``python -m host.softswitch``, :func:`software_target`; the clients
reach it over UDP, node config ``switch-udp`` and ``bind-ip``) or BMv2 on veth links (each
client's raw endpoint in its host's network namespace, node config :data:`RAW_KEYS`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from control_plane.fielding.network import ClusterNetwork, NetworkUpdate

log = logging.getLogger(__name__)

#: Seconds a client waits for its cluster's other members before the all-reduce gives up
#: (SuperNodes pull their messages independently; on a loaded machine they start seconds apart).
GIVE_UP_S = 60.0
#: Config keys of a train message that carry the node's job (:func:`network_train` reads them).
JOB_KEYS = ("job-id", "rank", "world", "num-slots", "granularity", "round-base", "token")
#: Node-config keys of a client that reaches its switch over a veth link (BMv2).
RAW_KEYS = ("netns", "iface", "mac", "ip", "switch-mac", "switch-ip")


def host_name(partition_id: int) -> str:
    """Host name of the client with ``partition-id`` in the controller file."""
    return f"p{partition_id}"


def host_ip(partition_id: int) -> str:
    """Loopback address the client with ``partition-id`` sends from (127.0.1.x)."""
    if not 0 <= partition_id < 254:
        raise ValueError(f"partition-id {partition_id}: the software-target layout holds "
                         "partitions 0..253")
    return f"127.0.1.{partition_id + 1}"


@dataclass
class SoftwareTarget:
    """Layout of one software switch serving ``n`` clients (see :func:`software_target`).

    Attributes
    ----------
    base : dict
        Controller file without jobs (``docs/controller.md``).
    port_specs : list of str
        ``--port`` values of ``python -m host.softswitch``: port ``pid + 1`` is client
        ``pid``'s UDP port.
    node_configs : list of dict
        Per partition: the SuperNode's ``--node-config`` keys (``partition-id``,
        ``num-partitions``, ``switch-udp``, ``bind-ip``).
    """

    base: dict
    port_specs: list[str]
    node_configs: list[dict]


def software_target(n_clients: int, grpc_port: int, udp_ports: Sequence[int]) -> SoftwareTarget:
    """One software switch on loopback with client ``pid`` on port ``pid + 1`` (UDP)."""
    if len(udp_ports) != n_clients:
        raise ValueError(f"udp_ports: {len(udp_ports)} ports for {n_clients} clients")
    hosts = [{"name": host_name(p), "mac": f"02:00:00:01:{p // 256:02x}:{p % 256:02x}",
              "ip": host_ip(p), "attach": f"s1:{p + 1}"} for p in range(n_clients)]
    base = {"switches": [{"name": "s1", "address": f"127.0.0.1:{grpc_port}",
                          "addr": "127.0.0.254", "target": "softswitch", "ports": n_clients}],
            "hosts": hosts}
    specs = [f"{p + 1}=udp:127.0.0.1:{udp_ports[p]}" for p in range(n_clients)]
    nodes = [{"partition-id": p, "num-partitions": n_clients,
              "switch-udp": f"127.0.0.1:{udp_ports[p]}", "bind-ip": host_ip(p)}
             for p in range(n_clients)]
    return SoftwareTarget(base, specs, nodes)


@dataclass
class RoundRecord:
    """What one in-network round did, per cluster (for checks against Python FedAvg).

    ``clusters``: cluster id -> ``{"partitions", "sent", "sum", "weight", "result"}`` (the
    members' partition ids in rank order, the model sent, the sum the job returned, the
    members' total ``num-examples``, the new model).
    """

    round: int
    clusters: dict[int, dict[str, Any]] = field(default_factory=dict)
    update: NetworkUpdate | None = None


class InNetworkAggregation:
    """Server side: keeps the switches' THC jobs equal to the clustering; cluster sums -> models.

    Parameters
    ----------
    base : mapping
        Controller file without ``jobs`` whose hosts are named :func:`host_name` of the
        clients' ``partition-id`` (e.g. :attr:`SoftwareTarget.base`).
    host_of : callable, optional
        ``partition-id -> host name``; default :func:`host_name`.
    **network
        Passed to :class:`~control_plane.fielding.network.ClusterNetwork` (``num_slots``,
        ``job_id_base``, ``thc``, ``timeout``, ...).
    """

    def __init__(self, base: Mapping[str, Any], *,
                 host_of: Callable[[int], str] = host_name, **network: Any) -> None:
        self.partitions: dict[int, int] = {}
        self._host_of = host_of
        self.net = ClusterNetwork(base, host_of=self._node_host, **network)
        self.rounds: list[RoundRecord] = []

    def _node_host(self, node: Any) -> str:
        if node not in self.partitions:
            raise ValueError(f"node {node}: no partition-id known (its SuperNode needs "
                             "--node-config 'partition-id=<n>')")
        return self._host_of(self.partitions[node])

    def install(self, clusters: Mapping[int, Sequence[int]], partitions: Mapping[int, int],
                server_round: int) -> dict[int, dict[str, int]]:
        """Reconcile the switches to ``clusters`` (cluster id -> node ids); each node's job keys.

        Returns ``node id -> {"job-id", "rank", "world", "num-slots", "granularity",
        "round-base", "token"}`` for the node's train message.
        """
        from host.transport.job import session_round_base

        self.partitions.update(partitions)
        upd = self.net.update({c: list(m) for c, m in clusters.items()})
        tokens = self.net.controller.tokens if self.net.controller is not None else {}
        base = session_round_base()
        rec = RoundRecord(server_round, update=upd)
        out: dict[int, dict[str, int]] = {}
        for cid, job in upd.plan.jobs.items():
            rec.clusters[cid] = {"partitions": [self.partitions[n] for n in job.clients]}
            for node in job.clients:
                out[int(node)] = {"job-id": job.id, "rank": job.rank(node), "world": job.world,
                                  "num-slots": job.num_slots, "granularity": job.granularity,
                                  "round-base": base, "token": int(tokens.get(job.id, 0))}
        self.rounds.append(rec)
        log.info("round %d: %d THC jobs installed (%d P4Runtime writes, touched %s)",
                 server_round, len(upd.plan.jobs), upd.writes, upd.touched_jobs)
        return out

    def apply(self, models: dict[int, dict[str, np.ndarray]], sums: Mapping[int, dict],
              weights: Mapping[int, float], sent_to: Mapping[int, int]
              ) -> dict[int, dict[str, np.ndarray]]:
        """New cluster models: ``w + sum / weight`` for every cluster whose sum came back.

        A cluster whose sum is missing (its rank-0 member failed) keeps its model.
        """
        rec = self.rounds[-1] if self.rounds else RoundRecord(-1)
        out = dict(models)
        for cid, weight in weights.items():
            if cid not in sums:
                log.warning("cluster %d: no sum came back from its job; model kept", cid)
                continue
            sent = models[cid]
            out[cid] = {k: sent[k] + np.asarray(sums[cid][k], dtype=float) / weight for k in sent}
            rec.clusters.setdefault(cid, {}).update(
                sent={k: v.copy() for k, v in sent.items()}, sum=sums[cid], weight=weight,
                result=out[cid])
        return out


def network_train(cfg: Mapping[str, Any], node_config: Mapping[str, Any],
                  update: np.ndarray) -> np.ndarray | None:
    """Client side: sum ``update`` over the cluster's members through its THC job.

    ``cfg``: the train message's config (:data:`JOB_KEYS`); ``node_config``: the SuperNode's,
    naming its way to the switch: ``switch-udp`` (``host:port`` of its port on the software
    target) and ``bind-ip``, or, for a switch on veth links (BMv2), :data:`RAW_KEYS` (the
    host's network namespace and interface, its MAC and IP, the switch's MAC and IP; the
    endpoint is opened in that namespace, which needs root). Returns the sum on rank 0 (which
    replies it to the server), ``None`` on the other members.
    """
    import torch

    from host.thc import THCCodec
    from host.transport.job import JobSpec, NetworkAggregator
    from host.transport.ports import UdpEndpoint
    from host.transport.slots import SlotConfig

    spec = JobSpec(int(cfg["job-id"]), int(cfg["rank"]), int(cfg["world"]),
                   num_slots=int(cfg["num-slots"]), granularity=int(cfg["granularity"]),
                   round_base=int(cfg["round-base"]), token=int(cfg["token"]))
    if "netns" in node_config:
        from host.netns import in_netns
        from host.transport.ports import RawEndpoint

        missing = [k for k in RAW_KEYS if k not in node_config]
        if missing:
            raise ValueError(f"node config: {missing[0]} missing; a SuperNode on a veth link "
                             f"needs --node-config with {', '.join(RAW_KEYS)}")
        nc = {k: str(node_config[k]) for k in RAW_KEYS}
        ep = in_netns(nc["netns"], lambda: RawEndpoint(nc["iface"], nc["mac"], nc["switch-mac"],
                                                       nc["ip"], nc["switch-ip"]))
    else:
        if "switch-udp" not in node_config:
            raise ValueError("node config: switch-udp missing; start the SuperNode with "
                             "--node-config 'switch-udp=\"127.0.0.1:<port>\"' (in-network mode)")
        host, _, port = str(node_config["switch-udp"]).rpartition(":")
        ep = UdpEndpoint((host, int(port)),
                         bind=(str(node_config.get("bind-ip", "127.0.0.1")), 0))
    agg = NetworkAggregator(ep, spec, SlotConfig(give_up=GIVE_UP_S))
    shape = update.shape
    try:
        avg = agg.allreduce(torch.from_numpy(np.ascontiguousarray(update, dtype=np.float32)
                                             .reshape(-1)), THCCodec())
    except BaseException:
        agg.close(finish=False)
        raise
    agg.close()
    if spec.rank != 0:
        return None
    return (avg.numpy().astype(np.float64) * spec.world).reshape(shape)
