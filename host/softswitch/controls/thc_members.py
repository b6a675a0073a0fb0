"""ThcMembers (``p4/v1model/include/control/thc_members.p4``): the egress table that rewrites
each multicast copy of a result for its member (destination MAC and address)."""

from __future__ import annotations

import numpy as np

from host.softswitch.config import Compiled, member_key


def lookup(cfg: Compiled, job_ids: np.ndarray, ports: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hit, position in ``cfg.member_keys``) of the (job id, egress port) pairs; the table
    must not be empty."""
    keys = member_key(job_ids, ports)
    pos = np.minimum(np.searchsorted(cfg.member_keys, keys), cfg.member_keys.size - 1)
    return cfg.member_keys[pos] == keys, pos
