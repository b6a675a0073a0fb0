"""ThcEmit and ThcOutput (``p4/v1model/include/control/thc_emit.p4``, ``thc_output.p4``):
results, answers and partials rewritten from the incoming header, their payloads from the
copy's sums, replicated to the multicast group (egress: :mod:`.thc_members`), the ingress port
or the parent."""

from __future__ import annotations

import numpy as np

from host.protocol import layout as lay
from host.softswitch.config import Compiled
from host.softswitch.controls import thc_members
from host.softswitch.controls.common import (
    DST_MAC,
    ETH,
    F_RESENT,
    IP4,
    IS_NORM,
    LANE_DT,
    NO_PORTS,
    OUT_ANSWER,
    OUT_MULTICAST,
    OUT_UP,
    PAY_OFF,
    PAYLOAD_CLASS,
    RESULT_TTL,
    ROW_DTYPE,
    ROW_DTYPE_HDR,
    SRC_MAC,
    T_NORM_PARTIAL,
    T_NORM_RESULT,
    T_PARTIAL,
    T_RESULT,
    THC_PORT,
    UDP,
    count,
)


class ThcOutput:
    """Mixin of :class:`~host.softswitch.pipeline.Pipeline`: :meth:`_emit`."""

    def _emit(self, b, v, emits, cfg: Compiled) -> None:
        """ThcEmit + ThcOutput (+ multicast replication and ThcMembers) for ``emits``."""
        e = emits if isinstance(emits, np.ndarray) else np.array(emits, dtype=np.int64)
        e_row, e_cell, e_act, e_cnt, e_wb, e_flags, e_jn = e.T
        job = cfg.job
        m = len(e)
        is_mc_e = e_act == OUT_MULTICAST
        is_ans_e = e_act == OUT_ANSWER
        # counters: results (multicast + up), resent (answers, not status answers)
        count(self.counters.results, job["index"][e_jn[~is_ans_e]])
        if is_ans_e.any():
            count(self.counters.resent, job["index"][e_jn[is_ans_e & (e_flags == F_RESENT)]])
        # -- per emission: header (ThcOutput) and payload (ThcEmit) --------------------------
        H = self._hb[e_row]
        hv = H.view(ROW_DTYPE_HDR)[:, 0]
        norm = IS_NORM[hv["msg_type"]]
        lane = np.where(norm, 32, job["lane_bits"][e_jn])
        is_up = e_act == OUT_UP
        hv["count"] = e_cnt
        hv["bitmap"] = e_wb
        hv["sport"] = THC_PORT
        hv["udp_csum"] = 0
        hv["lane_bits"] = lane
        hv["ttl"] = RESULT_TTL
        hv["msg_type"] = np.where(is_up, np.where(norm, T_NORM_PARTIAL, T_PARTIAL),
                                  np.where(norm, T_NORM_RESULT, T_RESULT))
        hv["flags"] = e_flags
        hv["rank"] = np.where(is_up, job["self_id"][e_jn], np.where(is_mc_e, lay.RANK_ALL, hv["rank"]))
        old_src = hv["src"].copy()
        hv["src"] = job["self_addr"][e_jn]
        hv["dst"] = np.where(is_up, job["parent_addr"][e_jn], np.where(is_ans_e, old_src, hv["dst"]))
        if is_ans_e.any():
            a = np.flatnonzero(is_ans_e)
            dmac, smac = H[a, DST_MAC].copy(), H[a, SRC_MAC].copy()
            H[a, DST_MAC], H[a, SRC_MAC] = smac, dmac
        # each emission's sums (norms: 32-bit rows; data: as wide as the job's lanes,
        # Pipeline.sums_for), as uint32 below
        if (lane == lane[0]).all():
            pay = self.sums_for(int(lane[0]))[e_cell].astype(np.uint32)
        else:
            pay = np.empty((m, self.coords), dtype=np.uint32)
            for w in np.unique(lane).tolist():
                sel = lane == w
                pay[sel] = self.sums_for(w)[e_cell[sel]]
        for i in np.flatnonzero(e_cell < 0).tolist():
            # status answer: the payload is what the packet itself loaded (not meaningful)
            row = e_row[i: i + 1]
            pc = int(PAYLOAD_CLASS[v["msg_type"][row[0]], v["lane_bits"][row[0]]])
            vals = self._values(b, row, e_jn[i: i + 1], pc, cfg)[0]
            pay[i] = 0
            pay[i, : vals.size] = vals
        plen = np.where(norm, lay.NORMS.nbytes, lane * (self.coords // 8))
        nbmax = int(plen.max())
        # M: each emission's message (headers + payload) built once, copied per replica
        M = np.empty((m, PAY_OFF + nbmax), dtype=np.uint8)
        dnorm = ~norm
        if dnorm.all() and (lane == lane[0]).all():
            w = int(lane[0])                          # the common case: one lane width
            M[:, PAY_OFF:] = pay.astype(LANE_DT[w]).view(np.uint8).reshape(m, nbmax)
        else:
            for w in np.unique(lane[dnorm]).tolist():
                sel = dnorm & (lane == w)
                nb = w * self.coords // 8
                raw = pay[sel].astype(LANE_DT[w])   # truncation to the lane (THC step 10)
                M[sel, PAY_OFF: PAY_OFF + nb] = raw.view(np.uint8).reshape(-1, nb)
            if norm.any():
                nb = lay.NORMS.nbytes
                raw = pay[norm, : lay.NORMS_PER_PACKET].astype(">u4")
                M[norm, PAY_OFF: PAY_OFF + nb] = raw.view(np.uint8).reshape(-1, nb)
        hv["udp_len"] = UDP + lay.THC_HEADER_BYTES + plen
        hv["ip_len"] = UDP + lay.THC_HEADER_BYTES + plen + IP4
        # IPv4 checksum without the destination (added per replica below)
        dst_e = hv["dst"].copy()
        hv["dst"] = 0
        hv["ip_csum"] = 0
        words = H[:, ETH: ETH + IP4].view(">u2").astype(np.int64)
        partial = words.sum(axis=1)
        M[:, :PAY_OFF] = H
        # bytes the parser did not consume stay behind the emitted headers (as in BMv2)
        in_pay = self.payload_bytes[v["msg_type"][e_row], v["lane_bits"][e_row]]
        tail = self._lens[e_row] - PAY_OFF - in_pay
        # -- replication: multicast group copies, answers to the ingress port, partials up --
        if is_mc_e.all():
            grp = job["mcast_grp"][e_jn]
            if (grp == grp[0]).all():
                ports = cfg.groups.get(int(grp[0]), NO_PORTS)
                ri = np.repeat(np.arange(m), len(ports))
                eg = np.tile(ports, m)
            else:
                ri, eg = self._replicas(e_act, e_row, e_jn, cfg)
        else:
            ri, eg = self._replicas(e_act, e_row, e_jn, cfg)
        k = len(ri)
        if k == 0:
            return
        out = self.out
        start = out.n
        if start + k > len(out.lens):
            keep = (out.buf[:start].copy(), out.lens[:start].copy(), out.ports[:start].copy())
            out.reserve(start + k)
            out.buf[:start], out.lens[:start], out.ports[:start] = keep
        o = out.buf[start: start + k]
        o[:, : PAY_OFF + nbmax] = M[ri]
        olen = PAY_OFF + plen[ri]
        if (tail > 0).any():
            for i in np.flatnonzero(tail[ri] > 0).tolist():
                er = e_row[ri[i]]
                extra = b[er, PAY_OFF + in_pay[ri[i]]: self._lens[er]]
                o[i, olen[i]: olen[i] + extra.size] = extra
                olen[i] += extra.size
        ov = o.view(ROW_DTYPE)[:, 0]
        dst = dst_e[ri].astype(np.int64)
        mc = is_mc_e[ri]
        if mc.any() and cfg.member_keys.size:   # egress: ThcMembers
            mi = np.flatnonzero(mc)
            hit, pos = thc_members.lookup(cfg, cfg.job_id[e_jn[ri[mi]]], eg[mi])
            mh, ph = mi[hit], pos[hit]
            o[mh, 0:6] = cfg.member_mac[ph]
            dst[mh] = cfg.member_addr[ph]
        ov["dst"] = dst
        c = partial[ri] + (dst >> 16) + (dst & 0xFFFF)   # ComputeChecksumImpl
        c = (c & 0xFFFF) + (c >> 16)
        c = (c & 0xFFFF) + (c >> 16)
        ov["ip_csum"] = ~c & 0xFFFF
        out.lens[start: start + k] = olen
        out.ports[start: start + k] = eg
        out.n = start + k

    def _replicas(self, e_act, e_row, e_jn, cfg: Compiled) -> tuple[np.ndarray, np.ndarray]:
        """(emission index, egress port) of every output copy, general case."""
        rep: list[int] = []
        egress: list[int] = []
        job = cfg.job
        for i, (act, j, row) in enumerate(zip(e_act.tolist(), e_jn.tolist(), e_row.tolist(), strict=True)):
            if act == OUT_MULTICAST:
                ports = cfg.groups.get(int(job["mcast_grp"][j]), NO_PORTS)
                rep.extend([i] * len(ports))
                egress.extend(ports.tolist())
            elif act == OUT_ANSWER:
                rep.append(i)
                egress.append(int(self._ports[row]))
            else:
                rep.append(i)
                egress.append(int(job["parent_port"][j]))
        return np.array(rep, dtype=np.int64), np.array(egress, dtype=np.int64)
