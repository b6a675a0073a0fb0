"""The two-level tree of the tree tests (BMv2 in tests/p4/test_p4_tree.py, the software target
in tests/host/softswitch/test_softswitch_tree.py): hosts a0, a1 under leaf0, b0, b1 under
leaf1, both leaves under root; job 7 on all three switches (16-bit lanes, n = 4)."""

from __future__ import annotations

import numpy as np

from host.protocol import codec
from host.protocol.layout import COORDS_PER_PACKET, MsgType, round_fields
from tests.support.aggnet import AggregationNetwork, SwitchJob, Worker
from tests.support.frames import collect, thc_frame
from tests.support.jobs import TABLE
from tests.support.token import TOKEN

RANKS = {"a0": 0, "a1": 1, "b0": 2, "b1": 3}
LEAF = {"a0": "leaf0", "a1": "leaf0", "b0": "leaf1", "b1": "leaf1"}
HOSTS = list(RANKS)


def install_tree_job(net: AggregationNetwork) -> SwitchJob:
    """Job 7 on both leaves (their hosts' ranks, the root as parent) and the root (the leaves
    as child switches 0 and 1); ``net.links`` holds each leaf's (leaf port, root port). Returns
    the root's job."""
    root_ip = net.switch_ip("root")
    children = []
    for child_id, leaf in enumerate(("leaf0", "leaf1")):
        leaf_port, root_port = net.links[leaf]
        workers = [Worker(RANKS[h], net.hosts[h].port, net.hosts[h].ip, net.hosts[h].mac)
                   for h in HOSTS if LEAF[h] == leaf]
        net.install_job(leaf, SwitchJob(
            job_id=7, index=0, table=TABLE, lane_bits=16, self_ip=net.switch_ip(leaf),
            contributors=workers, parent_port=leaf_port, parent_ip=root_ip, self_id=child_id))
        children.append(Worker(child_id, root_port, net.switch_ip(leaf), is_switch=True))
    job = SwitchJob(job_id=7, index=0, table=TABLE, lane_bits=16, self_ip=root_ip,
                    contributors=children)
    net.install_job("root", job)
    for h in HOSTS:
        net.flush(h)
    return job


def send_data(net: AggregationNetwork, host: str, slot: int, rnd: int, idx: np.ndarray,
              flags: int = 0) -> None:
    """``host``'s DATA of job 7 for ``slot`` in round ``rnd`` (4-bit indices ``idx``) to its leaf."""
    lo, hi = round_fields(rnd)           # rnd: the 48-bit round
    hd = codec.Header(msg_type=MsgType.DATA, job_id=7, slot=slot, round=lo, round_hi=hi,
                      rank=RANKS[host],
                      flags=flags, token=TOKEN)
    net.send(host, thc_frame(net.hosts[host], net.switch_ip(LEAF[host]), hd, idx))


def full_round(net: AggregationNetwork, rng: np.random.Generator, slot: int, rnd: int,
               flags: int = 0) -> tuple[dict, np.ndarray]:
    """Every host sends random indices for ``slot`` in round ``rnd``: what each host received,
    and the sum of the four contributions' table values it should be."""
    idxs = {h: rng.integers(0, 16, COORDS_PER_PACKET) for h in HOSTS}
    for h in HOSTS:
        send_data(net, h, slot, rnd, idxs[h], flags=flags)
    got = collect(net, HOSTS, more=4)
    return got, np.sum([np.asarray(TABLE)[i] for i in idxs.values()], axis=0)
