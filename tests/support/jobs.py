"""The packet suites' jobs on one switch: THC's default table, the lane rule, a job over
some of the switch's hosts (installed through the aggregation harness) and the sums to expect."""

from __future__ import annotations

import itertools
import weakref

import numpy as np

from host.protocol import generated_dataplane as dp
from host.protocol.layout import COORDS_PER_PACKET
from host.thc.table import DEFAULT_TABLE
from tests.support.aggnet import AggregationNetwork, SwitchJob, Worker
from tests.support.token import TOKEN

#: THC's default table (b = 4, g = 30)
TABLE = list(DEFAULT_TABLE)
#: the switch of the single-switch topology
SWITCH = "s0"
#: per started network: next job index (keyed by the object, not ``id()``: CPython gives a
#: closed network's address to the next one, which then went on from the old count)
_ids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def lane_bits_check(n: int, g: int) -> int:
    """Tiny local version of the lane rule (THC step 10), independent of the layout helper."""
    return 8 if n * g <= 255 else 16 if n * g <= 65535 else 32


def new_job(net: AggregationNetwork, hosts: list[str], lane_bits: int | None = None,
            table: list[int] = TABLE, num_slots: int = 4, token: int = TOKEN,
            udp_port: int = 0) -> SwitchJob:
    """A job of ``hosts`` (rank = position) on the network's switch ``SWITCH``, installed;
    ``udp_port``: the UDP source port its sender bindings name (0: any)."""
    k = next(_ids.setdefault(net, itertools.count(0)))
    assert k < dp.MAX_JOBS, "more jobs than MAX_JOBS in p4/shared/size.p4"
    contributors = []
    for rank, name in enumerate(hosts):
        h = net.hosts[name]
        contributors.append(Worker(rank=rank, port=h.port, ip=h.ip, mac=h.mac, udp_port=udp_port))
    job = SwitchJob(job_id=100 + k, index=k, table=table,
                    lane_bits=lane_bits or lane_bits_check(len(hosts), max(table)),
                    self_ip=net.switch_ip(SWITCH), contributors=contributors,
                    slot_base=k * num_slots, num_slots=num_slots, token=token)
    net.install_job(SWITCH, job)
    for name in hosts:
        net.flush(name)
    return job


def expected_sums(idxs: list[np.ndarray], table=TABLE) -> np.ndarray:
    t = np.asarray(table)
    return np.sum([t[i] for i in idxs], axis=0)


def random_indices(rng: np.random.Generator, hosts: list[str]) -> list[np.ndarray]:
    """Each host's random 4-bit indices for one packet (by rank)."""
    return [rng.integers(0, 16, COORDS_PER_PACKET) for _ in hosts]


def assert_exact_results(got: dict, hosts: list[str], idxs: list[np.ndarray], **header) -> None:
    """Every host of ``hosts`` received one result, with the header fields ``header`` (name:
    value), whose values are the exact sums of ``idxs``."""
    want = expected_sums(idxs)
    for h in hosts:
        assert len(got[h]) == 1, f"{h}: {len(got[h])} results"
        for name, value in header.items():
            assert getattr(got[h][0].msg.header, name) == value, (h, name)
        np.testing.assert_array_equal(got[h][0].msg.values, want)
