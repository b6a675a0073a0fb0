"""ThcAccumulate (``p4/v1model/include/control/thc_accumulate.p4``): add (THC step 9) or take
the maximum (norms) into a copy's sums, store a parent's result, flushed only where a later
packet must see an earlier packet's result."""

from __future__ import annotations

import numpy as np

from host.softswitch.config import Compiled
from host.softswitch.controls.common import PAYLOAD_CLASS, PC_NORMS, Pending


class ThcAccumulate:
    """Mixin of :class:`~host.softswitch.pipeline.Pipeline`: ACC_ADD / ACC_STORE."""

    def _add_groups(self, b, v, rows, jn, ucell, counts, fresh, cfg: Compiled) -> bool:
        """ACC_ADD when every touched copy gets the same number of frames of one payload
        class: sum each copy's frames first (one reduction), then overwrite (fresh round) or
        add. Returns ``False`` (nothing done) when the batch is not that regular."""
        c = int(counts[0])
        if (counts != c).any():
            return False
        pc = PAYLOAD_CLASS[v["msg_type"][rows], v["lane_bits"][rows]]
        if (pc != pc[0]).any():
            return False
        cls = int(pc[0])
        if cls == PC_NORMS:
            sums = self.sums
        else:   # data sums as wide as the job's lanes (Pipeline.sums_for)
            lanes = cfg.job["lane_bits"][jn]
            if (lanes != lanes[0]).any():
                return False
            sums = self.sums_for(int(lanes[0]))
        vals = self._values(b, rows, jn, cls, cfg)
        g, w = len(ucell), vals.shape[1]
        grouped = vals.reshape(g, c, w)
        red = (grouped.max(axis=1) if cls == PC_NORMS
               else grouped.sum(axis=1, dtype=np.uint32).astype(sums.dtype))
        if fresh.all():
            sums[ucell, :w] = red
            if w < sums.shape[1]:
                sums[ucell, w:] = 0
        else:
            old = sums[ucell, :w]
            old[fresh] = 0
            sums[ucell, :w] = np.maximum(old, red) if cls == PC_NORMS else old + red
            if w < sums.shape[1] and fresh.any():
                sums[ucell[fresh], w:] = 0
        self.counters.count_contributions(cfg.job["index"][jn], v["rank"][rows])
        self.outcomes["contribution"] += len(rows)
        return True

    def _apply_adds(self, b, v, a_rows, a_cells, over, occ, cfg: Compiled) -> None:
        """ThcAccumulate's ACC_ADD for rows (``occ``: how many earlier rows of this group add
        to the same cell; ``over``: the first contributor of a fresh round overwrites)."""
        jn = cfg.job_map[v["job_id"][a_rows].astype(np.int64)]
        self.counters.count_contributions(cfg.job["index"][jn], v["rank"][a_rows])
        self.outcomes["contribution"] += len(a_rows)
        pc = PAYLOAD_CLASS[v["msg_type"][a_rows], v["lane_bits"][a_rows]]
        # norms in 32-bit rows, data sums as wide as the job's lanes (Pipeline.sums_for)
        lane = np.where(pc == PC_NORMS, 32, cfg.job["lane_bits"][jn])
        if over.any():                       # the first contributor overwrites
            for w in np.unique(lane[over]).tolist():
                self.sums_for(w)[a_cells[over & (lane == w)]] = 0
        key = pc.astype(np.int64) * 64 + lane
        classes = [int(key[0])] if (key == key[0]).all() else np.unique(key).tolist()
        for k in classes:
            cls, sums = k // 64, self.sums_for(k % 64)
            sel = None if len(classes) == 1 else key == k
            rows = a_rows if sel is None else a_rows[sel]
            cs = a_cells if sel is None else a_cells[sel]
            oc = occ if sel is None else occ[sel]
            vals = self._values(b, rows, jn if sel is None else jn[sel], cls, cfg)
            if cls == PC_NORMS:
                w = vals.shape[1]
                for i, c in enumerate(cs.tolist()):
                    np.maximum(sums[c, :w], vals[i], out=sums[c, :w])
                continue
            vals = vals.astype(sums.dtype)   # wrapping as the lanes do
            # one pass per occurrence: the cells of a pass are distinct
            for p in range(int(oc.max()) + 1):
                if p == 0 and oc.max() == 0:
                    sums[cs] += vals
                else:
                    m = oc == p
                    if m.any():
                        sums[cs[m]] += vals[m]

    def _flush(self, b, v, pend: Pending, cfg: Compiled) -> None:
        """Apply pending adds/stores to the sums, then emit the pending outputs."""
        if pend.adds:
            a = np.array(pend.adds, dtype=np.int64)
            self._apply_adds(b, v, a[:, 0], a[:, 1], a[:, 2].astype(bool), a[:, 3], cfg)
            pend.adds.clear()
        if pend.stores:
            s_rows = np.array([s[0] for s in pend.stores], dtype=np.int64)
            jn = cfg.job_map[v["job_id"][s_rows].astype(np.int64)]
            pc = PAYLOAD_CLASS[v["msg_type"][s_rows], v["lane_bits"][s_rows]]
            for i, (_row, c) in enumerate(pend.stores):
                vals = self._values(b, s_rows[i: i + 1], jn[i: i + 1], int(pc[i]), cfg)[0]
                sums = self.sums_for(32 if pc[i] == PC_NORMS else int(cfg.job["lane_bits"][jn[i]]))
                sums[c, : vals.size] = vals.astype(sums.dtype)
            pend.stores.clear()
        if pend.emits:
            self._emit(b, v, pend.emits, cfg)
            pend.emits.clear()
        pend.touched.clear()
        pend.reads.clear()
