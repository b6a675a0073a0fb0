"""ThcValidate (``p4/v1model/include/control/thc_validate.p4``) and ThcLoad's table check:
the drop reason of every THC frame, vectorized over the batch."""

from __future__ import annotations

import logging

import numpy as np

from host.protocol import layout as lay
from host.softswitch.config import Compiled, sender_key
from host.softswitch.controls.common import IS_NORM, IS_SWITCH_TYPE, IS_UP, PAY_OFF, R, T

log = logging.getLogger(__name__)


class ThcValidate:
    """Mixin of :class:`~host.softswitch.pipeline.Pipeline`: :meth:`_validate`."""

    def _validate(self, v, L, ports, thc, reason, cfg: Compiled) -> None:
        """ThcValidate + ThcLoad's table check: drop reasons of THC frames (in place)."""
        t = v["msg_type"].astype(np.int64)
        lane = v["lane_bits"].astype(np.int64)
        r = np.zeros(len(t), dtype=np.int64)
        up = IS_UP[t]
        norm = IS_NORM[t]
        jid = v["job_id"].astype(np.int64)
        jn = cfg.job_map[jid]
        jx = np.where(jn < 0, len(cfg.job_id) - 1, jn)
        job = cfg.job
        # Later checks first, so that the earlier (P4-order) reason overwrites them.
        # Only indices need the job's THC table; the values uplink carries L[q] already.
        r[(t == T.DATA) & (lane == lay.INDEX_BITS) & ~cfg.has_table[jx]] = R.UNKNOWN_JOB
        rank = v["rank"].astype(np.int64)
        src = v["src"].astype(np.int64)
        if up.any():
            keys = sender_key(jx.astype(np.uint64), np.minimum(rank, 255).astype(np.uint64),
                              ports.astype(np.uint64), src.astype(np.uint64))
            sk = cfg.sender_keys
            if sk.size:
                pos = np.minimum(np.searchsorted(sk, keys), sk.size - 1)
                found = sk[pos] == keys
                is_sw = cfg.sender_is_switch[pos].astype(bool)
                # the binding's UDP port (0: any): another port is not this sender (issue 33)
                bound = cfg.sender_port[pos].astype(np.int64)
                found &= (bound == 0) | (bound == v["sport"].astype(np.int64))
            else:
                found = np.zeros(len(t), dtype=bool)
                is_sw = found
            r[up & (~found | (is_sw != IS_SWITCH_TYPE[t]))] = R.BAD_SENDER
        down = ~up
        if down.any():
            bad_parent = ((job["has_parent"][jx] == 0) | (ports != job["parent_port"][jx])
                          | (src != job["parent_addr"][jx]))
            r[down & bad_parent] = R.BAD_SENDER
        slot = v["slot"].astype(np.int64)
        r[(slot >= job["num_slots"][jx]) | (job["slot_base"][jx] + slot >= self.pool_slots)] = R.BAD_SLOT
        r[~norm & (t != T.DATA) & (lane != job["lane_bits"][jx])] = R.MALFORMED
        # the job's token: the first check after the job lookup (issue 16)
        r[v["token"].astype(np.int64) != job["token"][jx]] = R.BAD_SENDER
        r[jn < 0] = R.UNKNOWN_JOB
        limit = np.where(norm, lay.NORMS_PER_PACKET, self.coords)
        sset = v["slot_set"].astype(np.int64)
        rnd = v["round"].astype(np.int64)
        r[(up & (rank >= lay.MAX_WORKERS)) | (v["elem_count"] > limit)
          | (sset > 1) | (sset != (rnd & 1))] = R.MALFORMED
        pbytes = self.payload_bytes[t & 0xFF, lane & 0xFF]
        r[pbytes < 0] = R.MALFORMED
        r[(t == 0) | (t > T.NORM_PARTIAL)] = R.BAD_TYPE
        r[v["version"] != lay.THC_VERSION] = R.BAD_VERSION
        r[(L < PAY_OFF) | (PAY_OFF + np.maximum(pbytes, 0) > L)] = R.SHORT
        reason[thc] = r[thc]

    def _check_values(self, b, v, thc, reason, cfg: Compiled) -> None:
        """Values-uplink DATA whose lanes exceed the job's g: ``MALFORMED`` (in place).

        An honest worker sends table values L[q] in 0..g; a lane above g (255 on an 8-bit-lane
        job) wrapped the sum modulo the lane width while every lane stayed within n·g, so no
        worker could notice (issue 33, 5). With lanes bounded by g, what a member sends up adds
        no more than an honest contribution could (docs/security.md, "Members").
        """
        vals = (thc & (reason == 0) & (v["msg_type"] == T.DATA)
                & (v["lane_bits"] == lay.VALUE_BITS) & (v["version"] == lay.THC_VERSION))
        if not vals.any():
            return
        rows = np.flatnonzero(vals)
        jn = cfg.job_map[v["job_id"][rows].astype(np.int64)]
        top = cfg.value_top[jn]
        lanes = b[rows, PAY_OFF: PAY_OFF + self.coords]
        bad = lanes.max(axis=1).astype(np.int64) > top
        if bad.any():
            reason[rows[bad]] = R.MALFORMED
            log.debug("%d values-uplink frames with lanes above g dropped", int(bad.sum()))
