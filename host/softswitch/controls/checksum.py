"""ComputeChecksumImpl (``p4/v1model/include/control/checksum.p4``): the IPv4 header checksum
of frame rows."""

from __future__ import annotations

import numpy as np

from host.softswitch.controls.common import ETH, IP4


def ipv4_checksum_rows(o: np.ndarray, ov: np.ndarray) -> None:
    """Recompute the IPv4 header checksum of every row (ComputeChecksumImpl)."""
    ov["ip_csum"] = 0
    words = o[:, ETH: ETH + IP4].reshape(len(o), IP4 // 2, 2).astype(np.int64)
    s = (words[:, :, 0] << 8 | words[:, :, 1]).sum(axis=1)
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    ov["ip_csum"] = (~s) & 0xFFFF
