"""Routing (``p4/v1model/include/control/routing.p4``): ordinary IPv4 traffic, TTL check,
longest-prefix match, L2 rewrite."""

from __future__ import annotations

import numpy as np

from host.softswitch.config import Compiled
from host.softswitch.controls.checksum import ipv4_checksum_rows
from host.softswitch.controls.common import DST_MAC, OFF_DST, OFF_TTL, ROW_DTYPE, SRC_MAC, R


class Routing:
    """Mixin of :class:`~host.softswitch.pipeline.Pipeline`: :meth:`_route`."""

    def _route(self, b, L, rows: np.ndarray, reason, cfg: Compiled) -> None:
        """Routing control: TTL check, longest-prefix match, L2 rewrite (slow path)."""
        for i in rows.tolist():
            ttl = int(b[i, OFF_TTL])
            if ttl <= 1:
                reason[i] = R.TTL_EXPIRED
                continue
            dst = int.from_bytes(b[i, OFF_DST: OFF_DST + 4].tobytes(), "big")
            hit = next((rt for rt in cfg.routes
                        if (dst >> (32 - rt[0])) == (rt[1] >> (32 - rt[0]))), None)
            if hit is None:
                reason[i] = R.NO_ROUTE
                continue
            _, _, port, smac, dmac = hit
            out = self.out
            if out.n + 1 > len(out.lens):
                keep = (out.buf[: out.n].copy(), out.lens[: out.n].copy(), out.ports[: out.n].copy())
                out.reserve(out.n + 1)
                out.buf[: out.n], out.lens[: out.n], out.ports[: out.n] = keep
            o = out.buf[out.n: out.n + 1]
            n = int(L[i])
            o[0, :n] = b[i, :n]
            o[0, DST_MAC] = np.frombuffer(dmac, dtype=np.uint8)
            o[0, SRC_MAC] = np.frombuffer(smac, dtype=np.uint8)
            o[0, OFF_TTL] = ttl - 1
            ipv4_checksum_rows(o, o.view(ROW_DTYPE)[:, 0])
            out.lens[out.n] = n
            out.ports[out.n] = port
            out.n += 1
            self.routed += 1
            self.outcomes["routed"] += 1
