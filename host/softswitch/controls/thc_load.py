"""ThcLoad (``p4/v1model/include/control/thc_load.p4``): the per-coordinate values a frame adds
(4-bit indices through the job's THC table, values-uplink and result lanes, norms)."""

from __future__ import annotations

import numpy as np

from host.protocol import layout as lay
from host.softswitch.config import Compiled
from host.softswitch.controls.common import LANE_DT, PAY_OFF, PC_INDICES, PC_L8, PC_L16, PC_L32, PC_NORMS


class ThcLoad:
    """Mixin of :class:`~host.softswitch.pipeline.Pipeline`: :meth:`_values`."""

    def _values(self, b, rows: np.ndarray, jn: np.ndarray, pc: int, cfg: Compiled) -> np.ndarray:
        """Per-coordinate addends of ``rows`` (all of payload class ``pc``) as uint32."""
        if pc == PC_INDICES:
            packed = b[rows, PAY_OFF: PAY_OFF + self.coords // 2]
            lut = cfg.lut64
            if jn.size and (jn == jn[0]).all():
                pairs = np.take(lut[jn[0]], packed)
            else:
                pairs = lut[jn[:, None], packed]
            return pairs.view(np.uint32).reshape(len(rows), self.coords)
        if pc == PC_NORMS:
            raw = b[rows, PAY_OFF: PAY_OFF + lay.NORMS.nbytes]
            return raw.view(">u4").astype(np.uint32)
        w = {PC_L8: 8, PC_L16: 16, PC_L32: 32}[pc]
        raw = b[rows, PAY_OFF: PAY_OFF + w * self.coords // 8]
        return raw.view(LANE_DT[w]).astype(np.uint32)
