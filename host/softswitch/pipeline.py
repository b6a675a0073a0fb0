"""The data plane of the software target: the v1model program's semantics on frame batches.

One call of :meth:`Pipeline.process` takes a batch of Ethernet frames (rows of a preallocated
``uint8`` buffer, with their lengths and ingress ports) and produces the frames to transmit.
It follows ``p4/v1model/main.p4`` step by step (``docs/protocol.md`` is the specification):

1. parse Ethernet / IPv4 (no options, not fragmented) / UDP / THC / payload;
2. validate — version, type, (type, lane width), slot set = round parity, element count,
   rank, job entry, lane width of the job, slot range, sender binding (job, rank, ingress port,
   source address) or the parent binding of a result, THC table — all vectorized with numpy;
   a rejected packet touches no state and increments ``ingress.drops[reason]``;
3. the per-copy slot state machine (round, state, contributor bitmap, distinct contributors,
   worker count and bitmap per copy, SwitchML-style two copies per slot): a short Python loop
   over the accepted packets, because each decision depends on the previous one;
4. accumulation (THC step 9, Li et al. NSDI 2024: add the table values L[q]; norms: maximum of
   float32 bit patterns compared as unsigned integers, THC step 3), vectorized over the batch
   and flushed only where a later packet must see an earlier packet's result;
5. output — multicast of results to the job's group (each copy rewritten by the members table),
   answers to retransmissions, partial aggregates to the parent — built as numpy rows.

Everything is done in the same order the P4 program does it; differences are listed in
``docs/softswitch.md``.

The common case — a batch of plain worker contributions (4-bit indices) of one job without a
parent — runs in C when the extension ``_fastpath`` is built (``_fastpath.c``: the same checks,
slot logic, accumulation and result frames, packet by packet); any other batch, or
``NETCO_SOFTSWITCH_C=0``, takes the numpy/Python path below, which stays the reference.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass

import numpy as np

from host.protocol import framing as fr
from host.protocol import generated_dataplane as dp
from host.protocol import layout as lay
from host.softswitch.config import Compiled, member_key, sender_key

try:
    from host.softswitch import _fastpath
except ImportError:  # built without a C compiler: the numpy/Python path only
    _fastpath = None

log = logging.getLogger(__name__)

ETH, IP4, UDP = fr.ETH_HEADER_BYTES, fr.IPV4_HEADER_BYTES, fr.UDP_HEADER_BYTES
THC_OFF = fr.THC_OFFSET
PAY_OFF = fr.PAYLOAD_OFFSET
#: bytes per buffer row (a 1500-byte MTU frame plus room)
ROW = fr.ROW_BYTES
RESULT_TTL = dp.RESULT_TTL

ST_EMPTY, ST_COLLECTING, ST_SENT_UP, ST_FINAL = (dp.ST_EMPTY, dp.ST_COLLECTING, dp.ST_SENT_UP,
                                                 dp.ST_FINAL)
OUT_MULTICAST, OUT_ANSWER, OUT_UP = dp.OUT_MULTICAST, dp.OUT_ANSWER, dp.OUT_UP
KIND_DATA, KIND_NORM = dp.KIND_DATA, dp.KIND_NORM
R = lay.DropReason
T = lay.MsgType

# Payload classes: indices, lanes 8/16/32, norms (index into _PCLASS_*).
PC_NONE, PC_INDICES, PC_L8, PC_L16, PC_L32, PC_NORMS = 0, 1, 2, 3, 4, 5


#: header fields that are not in the row view (MACs are copied as bytes; tos/ident untouched)
_UNVIEWED = frozenset({"dst_mac", "src_mac", "tos", "ident"})
_FIELDS = [(name, off, {8: "u1", 16: ">u2", 32: ">u4"}[bits])
           for name, (off, bits) in fr.FIELDS.items() if name not in _UNVIEWED]
#: a structured view of a buffer row: every header field the pipeline reads or writes
ROW_DTYPE = np.dtype({"names": [f[0] for f in _FIELDS], "formats": [f[2] for f in _FIELDS],
                      "offsets": [f[1] for f in _FIELDS], "itemsize": ROW})


def _payload_tables() -> tuple[np.ndarray, np.ndarray]:
    """(msg_type, lane_bits) -> payload bytes (-1: undefined) and payload class."""
    nbytes = np.full((256, 256), -1, dtype=np.int32)
    pclass = np.zeros((256, 256), dtype=np.int8)
    cls = {lay.INDICES.name: PC_INDICES, lay.LANES[8].name: PC_L8, lay.LANES[16].name: PC_L16,
           lay.LANES[32].name: PC_L32, lay.NORMS.name: PC_NORMS}
    for t in lay.MsgType:
        for w in range(256):
            p = lay.payload_for(t, w)
            if p is not None:
                nbytes[t, w] = p.nbytes
                pclass[t, w] = cls[p.name]
    return nbytes, pclass


PAYLOAD_BYTES, PAYLOAD_CLASS = _payload_tables()
_IS_UP = np.zeros(256, dtype=bool)
_IS_UP[[int(t) for t in lay.UP_TYPES]] = True
_IS_NORM = np.zeros(256, dtype=bool)
_IS_NORM[[int(t) for t in lay.NORM_TYPES]] = True
_IS_SWITCH_TYPE = np.zeros(256, dtype=bool)
_IS_SWITCH_TYPE[[T.PARTIAL, T.NORM_PARTIAL]] = True
_LANE_DT = {8: np.dtype("u1"), 16: np.dtype(">u2"), 32: np.dtype(">u4")}
#: the same fields over a row cut to the headers (Ethernet .. THC)
ROW_DTYPE_HDR = np.dtype({"names": ROW_DTYPE.names,
                          "formats": [ROW_DTYPE.fields[n][0] for n in ROW_DTYPE.names],
                          "offsets": [ROW_DTYPE.fields[n][1] for n in ROW_DTYPE.names],
                          "itemsize": PAY_OFF})
_NO_PORTS = np.zeros(0, dtype=np.int64)
_OFF_JOB, _OFF_TTL, _OFF_DST = fr.offset("job_id"), fr.offset("ttl"), fr.offset("dst")
# plain ints (enum attribute access is slow in the per-batch code)
_THC_PORT = int(lay.THC_UDP_PORT)
_T_RESULT, _T_NORM_RESULT = int(T.RESULT), int(T.NORM_RESULT)
_T_PARTIAL, _T_NORM_PARTIAL = int(T.PARTIAL), int(T.NORM_PARTIAL)
_F_RETX, _F_RESENT = int(lay.Flag.RETX), int(lay.Flag.RESENT)
_F_DEADLINE, _F_PEEK = int(lay.Flag.DEADLINE), int(lay.Flag.PEEK)


def _native_enabled() -> bool:
    """Whether pipelines use the C fast path: built and not switched off with
    ``NETCO_SOFTSWITCH_C=0``.

    Raises
    ------
    ImportError
        If the built extension was compiled against another ``netco_layout.h`` than the one
        ``p4/gen.py`` generated with this layout (a stale build: rebuild it).
    """
    if _fastpath is None or os.environ.get("NETCO_SOFTSWITCH_C", "1") == "0":
        return False
    built = getattr(_fastpath, "LAYOUT_HASH", None)
    if built != dp.LAYOUT_HASH:
        raise ImportError(f"host/softswitch/_fastpath was built against another frame layout "
                          f"({built} != {dp.LAYOUT_HASH}): rebuild it with "
                          f"`.venv/bin/pip install -e .` (or set NETCO_SOFTSWITCH_C=0)")
    return True


#: Whether pipelines use the C fast path (see :func:`_native_enabled`).
NATIVE = _native_enabled()
_NATIVE_CONSTS = (lay.THC_VERSION, int(T.DATA), lay.INDEX_BITS, int(T.RESULT), lay.RANK_ALL,
                  int(lay.THC_UDP_PORT), lay.MAX_WORKERS, RESULT_TTL)


class _Pending:
    """Work decided by the slot loop but not yet applied (see ``Pipeline._flush``)."""

    __slots__ = ("adds", "emits", "reads", "stores", "touched")

    def __init__(self) -> None:
        self.adds: list[tuple[int, int, bool, int]] = []   # (row, cell, overwrite, occurrence)
        self.stores: list[tuple[int, int]] = []            # (row, cell)
        self.emits: list[tuple[int, ...]] = []             # (row, cell, action, cnt, wb, retx, job)
        self.touched: dict[int, int] = {}                  # cell -> pending adds
        self.reads: set[int] = set()                       # cells with pending reads


@dataclass
class Counters:
    """The program's counters (``ingress.*``) plus software-only totals."""

    drops: np.ndarray
    contributions: np.ndarray
    results: np.ndarray
    resent: np.ndarray

    @classmethod
    def empty(cls, jobs: int = dp.MAX_JOBS) -> Counters:
        """Counters not bound to a P4Runtime store."""
        z = lambda n: np.zeros(n, dtype=np.int64)  # noqa: E731
        return cls(z(lay.DROP_REASONS), z(jobs), z(jobs), z(jobs))


def _count(counter: np.ndarray, index: np.ndarray) -> None:
    """counter.count(index) for each index; out-of-range indices are ignored (as BMv2 does)."""
    index = index[(index >= 0) & (index < counter.size)]
    if index.size:
        counter += np.bincount(index, minlength=counter.size)[: counter.size]


class Outputs:
    """Frames to transmit: rows ``0..n-1`` of ``buf`` with lengths and egress ports;
    ``order`` lists them grouped by port (stable), for one send call per port."""

    def __init__(self, capacity: int) -> None:
        self.buf = np.zeros((capacity, ROW), dtype=np.uint8)
        self.lens = np.zeros(capacity, dtype=np.int64)
        self.ports = np.zeros(capacity, dtype=np.int64)
        self.order = np.zeros(0, dtype=np.int64)
        self.n = 0

    def reserve(self, k: int) -> None:
        """Make room for ``k`` frames (buffers grow, never shrink)."""
        if k > len(self.lens):
            cap = max(k, 2 * len(self.lens))
            self.buf = np.zeros((cap, ROW), dtype=np.uint8)
            self.lens = np.zeros(cap, dtype=np.int64)
            self.ports = np.zeros(cap, dtype=np.int64)

    def frames(self) -> list[tuple[int, bytes]]:
        """(port, frame) pairs (tests and the slow path)."""
        return [(int(self.ports[i]), self.buf[i, : self.lens[i]].tobytes())
                for i in self.order.tolist()]


class Pipeline:
    """Aggregation state and the per-batch processing of the netco v1model program.

    Parameters
    ----------
    pool_slots : int
        Slots shared by all jobs (``THC_SLOTS`` of ``p4/v1model/include/size.p4``); each has
        two copies for data and two for norms, 256 32-bit sums each.
    counters : Counters
        Counter arrays to add to (bound to the P4Runtime store by the switch).
    """

    def __init__(self, pool_slots: int = dp.THC_SLOTS, counters: Counters | None = None) -> None:
        self.pool_slots = pool_slots
        cells = pool_slots * 4
        self.sums = np.zeros((cells, lay.COORDS_PER_PACKET), dtype=np.uint32)
        # per-cell registers of thc_slot.p4: round, state, contributor bitmap, distinct
        # contributors, worker count and worker bitmap (int64 so bit 31 never overflows)
        self.st_round = np.zeros(cells, dtype=np.int64)
        self.st_state = np.zeros(cells, dtype=np.int64)
        self.st_contrib = np.zeros(cells, dtype=np.int64)
        self.st_nc = np.zeros(cells, dtype=np.int64)
        self.st_cnt = np.zeros(cells, dtype=np.int64)
        self.st_wb = np.zeros(cells, dtype=np.int64)
        #: use the vectorized path for batches of plain contributions (tests switch it off)
        self.fast = True
        #: try the C fast path first (with ``fast``; tests switch it off to compare)
        self.native = NATIVE
        #: batches the C fast path handled (software-only)
        self.native_batches = 0
        self.cfg = Compiled()
        self.counters = counters or Counters.empty()
        self.out = Outputs(256)
        #: software-only totals: frames in, frames out, frames routed
        self.rx = 0
        self.tx = 0
        self.routed = 0
        #: what happened to every frame that was not dropped (software-only): contribution,
        #: resent, peek, retx_up, release (deadline without adding), parent_result, routed
        self.outcomes: Counter[str] = Counter()

    # ------------------------------------------------------------------------------------
    def process(self, buf: np.ndarray, lens: np.ndarray, ports: np.ndarray, n: int,
                stamps: np.ndarray | None = None) -> Outputs:
        """Process ``n`` frames (rows ``0..n-1`` of ``buf``); returns the frames to send.

        ``stamps`` (receive times) orders a batch gathered from several ports by arrival, as a
        switch serves its ports; without it rows are taken in order. The returned
        :class:`Outputs` is reused by the next call.
        """
        out = self.out
        out.n = 0
        if n == 0:
            return out
        cfg = self.cfg
        self.rx += n
        if self.native and self.fast and self._native(buf, lens, ports, n, stamps, cfg):
            return out
        b = buf[:n]
        # one compact copy of the headers: every field read below stays in a few cache lines
        hb = np.ascontiguousarray(b[:, :PAY_OFF])
        self._hb = hb
        v = hb.view(ROW_DTYPE_HDR)[:, 0]
        L = lens[:n]
        ports = ports[:n]
        self._ports = ports
        self._lens = L

        # -- parser ----------------------------------------------------------------------
        is_ip = (L >= ETH) & (v["ethertype"] == fr.ETHERTYPE_IPV4)
        ip_ok = is_ip & (L >= ETH + IP4)
        to_udp = (ip_ok & (v["verihl"] & 0x0F == IP4 // 4) & (v["frag"] & 0x1FFF == 0)
                  & (v["proto"] == fr.IP_PROTO_UDP))
        udp_short = to_udp & (L < THC_OFF)
        thc = to_udp & ~udp_short & (v["dport"] == lay.THC_UDP_PORT)

        reason = np.zeros(n, dtype=np.int64)
        if thc.any():
            self._validate(v, L, ports, thc, reason, cfg)
        # non-THC: routed when IPv4 parsed without error, else NOT_IPV4
        routable = ip_ok & ~udp_short & ~thc
        reason[~thc & ~routable] = R.NOT_IPV4
        acc = np.flatnonzero(thc & (reason == 0))
        if stamps is not None and acc.size > 1:
            acc = acc[np.argsort(stamps[acc], kind="stable")]
        if acc.size:
            self._aggregate(b, v, L, ports, acc, reason, cfg)
        rt = np.flatnonzero(routable)
        if rt.size:
            self._route(b, L, rt, reason, cfg)
        dropped = reason[reason > 0]
        if dropped.size:
            _count(self.counters.drops, dropped)
        self.tx += out.n
        out.order = np.argsort(out.ports[: out.n], kind="stable")
        return out

    def _native(self, buf, lens, ports, n: int, stamps, cfg: Compiled) -> bool:
        """The whole batch through ``_fastpath`` (see the module docstring); ``False``: not
        its case, nothing changed."""
        if _fastpath is None or buf.dtype != np.uint8 or buf.shape[1] != ROW:
            return False
        job_id = (int(buf[0, _OFF_JOB]) << 8) | int(buf[0, _OFF_JOB + 1])
        jn = int(cfg.job_map[job_id])
        if jn < 0 or not cfg.has_table[jn]:
            return False
        nat = getattr(cfg, "_native", None)
        if nat is None:
            nat = cfg._native = {}  # type: ignore[attr-defined]
        per_job = nat.get(jn)
        if per_job is None:
            job = cfg.job
            gports = np.ascontiguousarray(cfg.groups.get(int(job["mcast_grp"][jn]), _NO_PORTS),
                                          dtype=np.int64)
            hit = np.zeros(len(gports), dtype=np.uint8)
            mac = np.zeros((len(gports), 6), dtype=np.uint8)
            addr = np.zeros(len(gports), dtype=np.uint32)
            if cfg.member_keys.size and len(gports):   # ThcMembers, as _emit looks it up
                keys = member_key(cfg.job_id[np.full(len(gports), jn)], gports)
                pos = np.minimum(np.searchsorted(cfg.member_keys, keys), cfg.member_keys.size - 1)
                h = cfg.member_keys[pos] == keys
                hit[h] = 1
                mac[h] = cfg.member_mac[pos[h]]
                addr[h] = cfg.member_addr[pos[h]]
            params = tuple(int(job[p][jn]) for p in ("slot_base", "num_slots", "expected",
                                                     "has_parent", "lane_bits", "self_addr",
                                                     "index"))
            per_job = nat[jn] = (params, np.ascontiguousarray(cfg.lut[jn]), gports, hit, mac,
                                 addr, np.ascontiguousarray(cfg.sender_keys, dtype=np.uint64),
                                 np.ascontiguousarray(cfg.sender_is_switch, dtype=np.uint8))
        params, lut, gports, hit, mac, addr, skeys, ssw = per_job
        out = self.out
        out.reserve(n * max(1, len(gports)))
        order = None
        if stamps is not None and n > 1:
            order = np.argsort(stamps[:n], kind="stable").astype(np.int64)
        lens64 = lens if lens.dtype == np.int64 else lens.astype(np.int64)
        ports64 = ports if ports.dtype == np.int64 else ports.astype(np.int64)
        res = _fastpath.process(
            buf, lens64, ports64, n, order, job_id, jn, params, lut, skeys, ssw, self.pool_slots,
            (self.st_round, self.st_state, self.st_contrib, self.st_nc, self.st_cnt, self.st_wb),
            self.sums, gports, hit, mac, addr, out.buf, out.lens, out.ports, _NATIVE_CONSTS)
        if res is None:
            return False
        nout, ncontrib, nresults = res
        index = params[6]
        c = self.counters
        if 0 <= index < c.contributions.size:
            c.contributions[index] += ncontrib
        if 0 <= index < c.results.size:
            c.results[index] += nresults
        self.outcomes["contribution"] += ncontrib
        out.n = nout
        self.tx += nout
        out.order = np.argsort(out.ports[:nout], kind="stable")
        self.native_batches += 1
        return True

    # ------------------------------------------------------------------------------------
    def _validate(self, v, L, ports, thc, reason, cfg: Compiled) -> None:
        """ThcValidate + ThcLoad's table check: drop reasons of THC frames (in place)."""
        t = v["msg_type"].astype(np.int64)
        lane = v["lane_bits"].astype(np.int64)
        r = np.zeros(len(t), dtype=np.int64)
        up = _IS_UP[t]
        norm = _IS_NORM[t]
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
            else:
                found = np.zeros(len(t), dtype=bool)
                is_sw = found
            r[up & (~found | (is_sw != _IS_SWITCH_TYPE[t]))] = R.BAD_SENDER
        down = ~up
        if down.any():
            bad_parent = ((job["has_parent"][jx] == 0) | (ports != job["parent_port"][jx])
                          | (src != job["parent_addr"][jx]))
            r[down & bad_parent] = R.BAD_SENDER
        slot = v["slot"].astype(np.int64)
        r[(slot >= job["num_slots"][jx]) | (job["slot_base"][jx] + slot >= self.pool_slots)] = R.BAD_SLOT
        r[~norm & (t != T.DATA) & (lane != job["lane_bits"][jx])] = R.MALFORMED
        r[jn < 0] = R.UNKNOWN_JOB
        limit = np.where(norm, lay.NORMS_PER_PACKET, lay.COORDS_PER_PACKET)
        sset = v["slot_set"].astype(np.int64)
        rnd = v["round"].astype(np.int64)
        r[(up & (rank >= lay.MAX_WORKERS)) | (v["elem_count"] > limit)
          | (sset > 1) | (sset != (rnd & 1))] = R.MALFORMED
        pbytes = PAYLOAD_BYTES[t & 0xFF, lane & 0xFF]
        r[pbytes < 0] = R.MALFORMED
        r[(t == 0) | (t > T.NORM_PARTIAL)] = R.BAD_TYPE
        r[v["version"] != lay.THC_VERSION] = R.BAD_VERSION
        r[(L < PAY_OFF) | (PAY_OFF + np.maximum(pbytes, 0) > L)] = R.SHORT
        reason[thc] = r[thc]

    # ------------------------------------------------------------------------------------
    def state(self) -> dict[str, np.ndarray]:
        """Copies of the per-cell registers (tests, debugging)."""
        return {k: getattr(self, f"st_{k}").copy()
                for k in ("round", "state", "contrib", "nc", "cnt", "wb")}

    def _aggregate(self, b, v, L, ports, acc, reason, cfg: Compiled) -> None:
        """ThcSlot, ThcAccumulate, ThcEmit and ThcOutput for the accepted THC frames."""
        t = v["msg_type"][acc].astype(np.int64)
        jn = cfg.job_map[v["job_id"][acc].astype(np.int64)]
        kind = _IS_NORM[t].astype(np.int64)
        job = cfg.job
        cell_a = (((job["slot_base"][jn] + v["slot"][acc]) << 2) | (kind << 1)
                  | v["slot_set"][acc].astype(np.int64))
        sw = _IS_SWITCH_TYPE[t]
        bit_a = np.left_shift(1, v["rank"][acc].astype(np.int64))
        # what this packet adds: a worker adds itself; a child switch its count and bitmap
        acnt_a = np.where(sw, v["count"][acc], 1).astype(np.int64)
        awb_a = np.where(sw, v["bitmap"][acc].astype(np.int64), bit_a)
        rnd_a = v["round"][acc].astype(np.int64)
        flags_a = v["flags"][acc].astype(np.int64)
        up_a = _IS_UP[t]
        if self.fast and self._fast_path(b, v, acc, jn, cell_a, rnd_a, bit_a, acnt_a, awb_a,
                                         flags_a, up_a, cfg):
            return
        acnt = acnt_a.tolist()
        awb = awb_a.tolist()
        pcnt = v["count"][acc].tolist()
        pbmp = v["bitmap"][acc].tolist()
        # the registers of the cells this batch touches, as Python lists (local index x)
        uc, inv = np.unique(cell_a, return_inverse=True)
        c_round, c_state = self.st_round[uc].tolist(), self.st_state[uc].tolist()
        c_contrib, c_nc = self.st_contrib[uc].tolist(), self.st_nc[uc].tolist()
        c_cnt, c_wb = self.st_cnt[uc].tolist(), self.st_wb[uc].tolist()

        pend = _Pending()
        touched = pend.touched
        reads = pend.reads
        late: list[tuple[int, int]] = []           # (row, reason) decided here
        flush = self._flush
        adds = pend.adds
        outc = self.outcomes
        emits = pend.emits
        for row, c, x, r, up, bit, exp, hp, j, a_cnt, a_wb, p_cnt, p_bmp, fl in zip(
                acc.tolist(), cell_a.tolist(), inv.tolist(), rnd_a.tolist(), up_a.tolist(),
                bit_a.tolist(), job["expected"][jn].tolist(), job["has_parent"][jn].tolist(),
                jn.tolist(), acnt, awb, pcnt, pbmp, flags_a.tolist(), strict=True):
            st = c_state[x]
            if up:
                if fl & _F_PEEK:
                    # status request: this copy's count/bitmap for this round; no state change
                    outc["peek"] += 1
                    if st == ST_EMPTY or c_round[x] != r:
                        emits.append((row, -1, OUT_ANSWER, 0, 0, _F_PEEK, j))
                    else:
                        emits.append((row, -1, OUT_ANSWER, c_cnt[x], c_wb[x], _F_PEEK, j))
                    continue
                fresh = st == ST_EMPTY
                if not fresh and c_round[x] != r:
                    if (r - c_round[x]) & 0x80000000:   # serial-number arithmetic: older
                        late.append((row, R.STALE))
                        continue
                    fresh = True
                if fresh:
                    cb = nc = cnt = wb = 0
                    st = ST_COLLECTING
                else:
                    cb, nc, cnt, wb = c_contrib[x], c_nc[x], c_cnt[x], c_wb[x]
                release = False
                if cb & bit:
                    # retransmission of a counted contribution: never counted twice
                    if st == ST_FINAL:
                        action, oflags = OUT_ANSWER, _F_RESENT
                        outc["resent"] += 1
                    elif st == ST_SENT_UP:
                        action, oflags = OUT_UP, _F_RETX | (fl & _F_DEADLINE)
                        outc["retx_up"] += 1
                    elif fl & _F_DEADLINE:
                        action, release = 0, True       # release now, add nothing
                        outc["release"] += 1
                    else:
                        late.append((row, R.DUPLICATE))
                        continue
                    if c in touched:
                        flush(b, v, pend, cfg)
                    if not release:
                        reads.add(c)
                        emits.append((row, c, action, cnt, wb, oflags, j))
                        continue
                elif st == ST_FINAL:
                    # released early (deadline) without this contributor: send it the result
                    if c in touched:
                        flush(b, v, pend, cfg)
                    reads.add(c)
                    emits.append((row, c, OUT_ANSWER, cnt, wb, _F_RESENT, j))
                    outc["resent"] += 1
                    continue
                elif st != ST_COLLECTING:
                    late.append((row, R.STALE))          # sent up without it
                    continue
                else:
                    if c in reads or (fresh and c in touched):
                        flush(b, v, pend, cfg)
                    cnt += a_cnt
                    wb |= a_wb
                    cb |= bit
                    nc += 1
                    occ = touched.get(c, 0)
                    touched[c] = occ + 1
                    adds.append((row, c, fresh, occ))
                    if fresh:
                        c_round[x] = r
                    release = nc >= exp or bool(fl & _F_DEADLINE)
                if release:
                    if hp:
                        st = ST_SENT_UP
                        emits.append((row, c, OUT_UP, cnt, wb, fl & _F_DEADLINE, j))
                    else:
                        st = ST_FINAL
                        emits.append((row, c, OUT_MULTICAST, cnt, wb, 0, j))
                    reads.add(c)
                c_state[x] = st
                c_contrib[x] = cb
                c_nc[x] = nc
                c_cnt[x] = cnt
                c_wb[x] = wb
            elif c_round[x] == r and st in (ST_SENT_UP, ST_FINAL):
                # a result from our parent (validated): store it and fan it out
                if c in touched or c in reads:
                    flush(b, v, pend, cfg)
                c_state[x] = ST_FINAL
                c_cnt[x] = p_cnt
                c_wb[x] = p_bmp
                pend.stores.append((row, c))
                outc["parent_result"] += 1
                touched[c] = 1
                reads.add(c)
                emits.append((row, c, OUT_MULTICAST, p_cnt, p_bmp, 0, j))
            else:
                late.append((row, R.STALE))
        flush(b, v, pend, cfg)
        self.st_round[uc], self.st_state[uc] = c_round, c_state
        self.st_contrib[uc], self.st_nc[uc] = c_contrib, c_nc
        self.st_cnt[uc], self.st_wb[uc] = c_cnt, c_wb
        for row, why in late:
            reason[row] = why

    def _fast_path(self, b, v, acc, jn, cell, rnd, bit, acnt, awb, flags, up, cfg: Compiled) -> bool:
        """The slot logic for a batch of plain contributions, vectorized per cell.

        Applies only when every accepted packet is a contribution without PEEK/DEADLINE, all
        packets of a cell carry the same round, that round is the cell's or newer, the cell
        collects, no contributor appears twice or was counted before, and a completion can
        only happen at a cell's last packet. Then the result equals the packet-by-packet
        logic (``tests/host/softswitch``: batch == one by one, fast == slow); otherwise
        returns ``False`` having changed nothing.
        """
        if not up.all() or (flags & (_F_PEEK | _F_DEADLINE)).any():
            return False
        m = len(acc)
        order = np.argsort(cell, kind="stable")
        cs = cell[order]
        first = np.empty(m, dtype=bool)
        first[0] = True
        np.not_equal(cs[1:], cs[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        counts = np.diff(np.append(starts, m))
        ucell = cs[starts]
        rs = rnd[order]
        R = rs[starts]
        if len(starts) != m:
            if (rs != np.repeat(R, counts)).any():
                return False                                 # two rounds of one cell
            js = jn[order]
            if (js != np.repeat(js[starts], counts)).any():
                return False                                 # overlapping slot ranges of jobs
        st = self.st_state[ucell]
        cr = self.st_round[ucell]
        ahead = ((R - cr) & 0xFFFFFFFF) < 0x80000000
        fresh = (st == ST_EMPTY) | ((cr != R) & ahead)
        if ((st != ST_EMPTY) & ~ahead).any() or (~fresh & (st != ST_COLLECTING)).any():
            return False                                     # stale, or complete already
        gor = np.bitwise_or.reduceat(bit[order], starts)
        if (np.bitwise_count(gor) != counts).any():
            return False                                     # a contributor twice
        base_cb = np.where(fresh, 0, self.st_contrib[ucell])
        if (base_cb & gor).any():
            return False                                     # retransmissions
        exp = cfg.job["expected"][jn[order][starts]]
        base_nc = np.where(fresh, 0, self.st_nc[ucell])
        if (base_nc + counts - 1 >= exp).any():
            return False                                     # more contributors than expected
        nc = base_nc + counts
        cnt = np.where(fresh, 0, self.st_cnt[ucell]) + np.add.reduceat(acnt[order], starts)
        wb = np.where(fresh, 0, self.st_wb[ucell]) | np.bitwise_or.reduceat(awb[order], starts)
        complete = nc >= exp
        hp = cfg.job["has_parent"][jn[order][starts]] != 0
        self.st_round[ucell] = R
        self.st_state[ucell] = np.where(complete, np.where(hp, ST_SENT_UP, ST_FINAL), ST_COLLECTING)
        self.st_contrib[ucell] = base_cb | gor
        self.st_nc[ucell] = nc
        self.st_cnt[ucell] = cnt
        self.st_wb[ucell] = wb
        rows = acc[order]
        if not self._add_groups(b, v, rows, jn[order], ucell, counts, fresh, cfg):
            over = np.zeros(m, dtype=bool)
            over[starts[fresh]] = True
            occ = np.arange(m) - np.repeat(starts, counts)
            self._apply_adds(b, v, rows, cs, over, occ, cfg)
        done = np.flatnonzero(complete)
        if done.size:
            last = starts[done] + counts[done] - 1
            when = np.argsort(order[last], kind="stable")    # in the order they completed
            last, done = last[when], done[when]
            e = np.zeros((len(done), 7), dtype=np.int64)
            e[:, 0] = rows[last]
            e[:, 1] = ucell[done]
            e[:, 2] = np.where(hp[done], OUT_UP, OUT_MULTICAST)
            e[:, 3] = cnt[done]
            e[:, 4] = wb[done]
            e[:, 6] = jn[order][last]
            self._emit(b, v, e, cfg)
        return True

    # ------------------------------------------------------------------------------------
    def _values(self, b, rows: np.ndarray, jn: np.ndarray, pc: int, cfg: Compiled) -> np.ndarray:
        """Per-coordinate addends of ``rows`` (all of payload class ``pc``) as uint32."""
        if pc == PC_INDICES:
            packed = b[rows, PAY_OFF: PAY_OFF + lay.INDICES.nbytes]
            lut = cfg.lut64
            if jn.size and (jn == jn[0]).all():
                pairs = np.take(lut[jn[0]], packed)
            else:
                pairs = lut[jn[:, None], packed]
            return pairs.view(np.uint32).reshape(len(rows), lay.COORDS_PER_PACKET)
        if pc == PC_NORMS:
            raw = b[rows, PAY_OFF: PAY_OFF + lay.NORMS.nbytes]
            return raw.view(">u4").astype(np.uint32)
        w = {PC_L8: 8, PC_L16: 16, PC_L32: 32}[pc]
        raw = b[rows, PAY_OFF: PAY_OFF + lay.LANES[w].nbytes]
        return raw.view(_LANE_DT[w]).astype(np.uint32)

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
        vals = self._values(b, rows, jn, cls, cfg)
        g, w = len(ucell), vals.shape[1]
        grouped = vals.reshape(g, c, w)
        red = grouped.max(axis=1) if cls == PC_NORMS else grouped.sum(axis=1, dtype=np.uint32)
        sums = self.sums
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
        _count(self.counters.contributions, cfg.job["index"][jn])
        self.outcomes["contribution"] += len(rows)
        return True

    def _apply_adds(self, b, v, a_rows, a_cells, over, occ, cfg: Compiled) -> None:
        """ThcAccumulate's ACC_ADD for rows (``occ``: how many earlier rows of this group add
        to the same cell; ``over``: the first contributor of a fresh round overwrites)."""
        sums = self.sums
        if over.any():
            sums[a_cells[over]] = 0          # the first contributor overwrites
        jn = cfg.job_map[v["job_id"][a_rows].astype(np.int64)]
        _count(self.counters.contributions, cfg.job["index"][jn])
        self.outcomes["contribution"] += len(a_rows)
        pc = PAYLOAD_CLASS[v["msg_type"][a_rows], v["lane_bits"][a_rows]]
        classes = [int(pc[0])] if (pc == pc[0]).all() else np.unique(pc).tolist()
        for cls in classes:
            sel = None if len(classes) == 1 else pc == cls
            rows = a_rows if sel is None else a_rows[sel]
            cs = a_cells if sel is None else a_cells[sel]
            oc = occ if sel is None else occ[sel]
            vals = self._values(b, rows, jn if sel is None else jn[sel], cls, cfg)
            if cls == PC_NORMS:
                w = vals.shape[1]
                for i, c in enumerate(cs.tolist()):
                    np.maximum(sums[c, :w], vals[i], out=sums[c, :w])
                continue
            # one pass per occurrence: the cells of a pass are distinct
            for p in range(int(oc.max()) + 1):
                if p == 0 and oc.max() == 0:
                    sums[cs] += vals
                else:
                    m = oc == p
                    if m.any():
                        sums[cs[m]] += vals[m]

    def _flush(self, b, v, pend: _Pending, cfg: Compiled) -> None:
        """Apply pending adds/stores to the sums, then emit the pending outputs."""
        sums = self.sums
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
                sums[c, : vals.size] = vals
            pend.stores.clear()
        if pend.emits:
            self._emit(b, v, pend.emits, cfg)
            pend.emits.clear()
        pend.touched.clear()
        pend.reads.clear()

    # ------------------------------------------------------------------------------------
    def _emit(self, b, v, emits, cfg: Compiled) -> None:
        """ThcEmit + ThcOutput (+ multicast replication and ThcMembers) for ``emits``."""
        e = emits if isinstance(emits, np.ndarray) else np.array(emits, dtype=np.int64)
        e_row, e_cell, e_act, e_cnt, e_wb, e_flags, e_jn = e.T
        job = cfg.job
        m = len(e)
        is_mc_e = e_act == OUT_MULTICAST
        is_ans_e = e_act == OUT_ANSWER
        # counters: results (multicast + up), resent (answers, not status answers)
        _count(self.counters.results, job["index"][e_jn[~is_ans_e]])
        if is_ans_e.any():
            _count(self.counters.resent, job["index"][e_jn[is_ans_e & (e_flags == _F_RESENT)]])
        # -- per emission: header (ThcOutput) and payload (ThcEmit) --------------------------
        H = self._hb[e_row]
        hv = H.view(ROW_DTYPE_HDR)[:, 0]
        norm = _IS_NORM[hv["msg_type"]]
        lane = np.where(norm, 32, job["lane_bits"][e_jn])
        is_up = e_act == OUT_UP
        hv["count"] = e_cnt
        hv["bitmap"] = e_wb
        hv["sport"] = _THC_PORT
        hv["udp_csum"] = 0
        hv["lane_bits"] = lane
        hv["ttl"] = RESULT_TTL
        hv["msg_type"] = np.where(is_up, np.where(norm, _T_NORM_PARTIAL, _T_PARTIAL),
                                  np.where(norm, _T_NORM_RESULT, _T_RESULT))
        hv["flags"] = e_flags
        hv["rank"] = np.where(is_up, job["self_id"][e_jn], np.where(is_mc_e, lay.RANK_ALL, hv["rank"]))
        old_src = hv["src"].copy()
        hv["src"] = job["self_addr"][e_jn]
        hv["dst"] = np.where(is_up, job["parent_addr"][e_jn], np.where(is_ans_e, old_src, hv["dst"]))
        if is_ans_e.any():
            a = np.flatnonzero(is_ans_e)
            macs = H[a, 0:12].copy()
            H[a, 0:6] = macs[:, 6:12]
            H[a, 6:12] = macs[:, 0:6]
        pay = self.sums[e_cell]
        for i in np.flatnonzero(e_cell < 0).tolist():
            # status answer: the payload is what the packet itself loaded (not meaningful)
            row = e_row[i: i + 1]
            pc = int(PAYLOAD_CLASS[v["msg_type"][row[0]], v["lane_bits"][row[0]]])
            vals = self._values(b, row, e_jn[i: i + 1], pc, cfg)[0]
            pay[i] = 0
            pay[i, : vals.size] = vals
        plen = np.where(norm, lay.NORMS.nbytes, lane * (lay.COORDS_PER_PACKET // 8))
        nbmax = int(plen.max())
        # M: each emission's message (headers + payload) built once, copied per replica
        M = np.empty((m, PAY_OFF + nbmax), dtype=np.uint8)
        dnorm = ~norm
        if dnorm.all() and (lane == lane[0]).all():
            w = int(lane[0])                          # the common case: one lane width
            M[:, PAY_OFF:] = pay.astype(_LANE_DT[w]).view(np.uint8).reshape(m, nbmax)
        else:
            for w in np.unique(lane[dnorm]).tolist():
                sel = dnorm & (lane == w)
                nb = lay.LANES[w].nbytes
                raw = pay[sel].astype(_LANE_DT[w])   # truncation to the lane (THC step 10)
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
        in_pay = PAYLOAD_BYTES[v["msg_type"][e_row], v["lane_bits"][e_row]]
        tail = self._lens[e_row] - PAY_OFF - in_pay
        # -- replication: multicast group copies, answers to the ingress port, partials up --
        if is_mc_e.all():
            grp = job["mcast_grp"][e_jn]
            if (grp == grp[0]).all():
                ports = cfg.groups.get(int(grp[0]), _NO_PORTS)
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
            keys = member_key(cfg.job_id[e_jn[ri[mi]]], eg[mi])
            pos = np.minimum(np.searchsorted(cfg.member_keys, keys), cfg.member_keys.size - 1)
            hit = cfg.member_keys[pos] == keys
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
                ports = cfg.groups.get(int(job["mcast_grp"][j]), _NO_PORTS)
                rep.extend([i] * len(ports))
                egress.extend(ports.tolist())
            elif act == OUT_ANSWER:
                rep.append(i)
                egress.append(int(self._ports[row]))
            else:
                rep.append(i)
                egress.append(int(job["parent_port"][j]))
        return np.array(rep, dtype=np.int64), np.array(egress, dtype=np.int64)

    # ------------------------------------------------------------------------------------
    def _route(self, b, L, rows: np.ndarray, reason, cfg: Compiled) -> None:
        """Routing control: TTL check, longest-prefix match, L2 rewrite (slow path)."""
        for i in rows.tolist():
            ttl = int(b[i, _OFF_TTL])
            if ttl <= 1:
                reason[i] = R.TTL_EXPIRED
                continue
            dst = int.from_bytes(b[i, _OFF_DST: _OFF_DST + 4].tobytes(), "big")
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
            o[0, 0:6] = np.frombuffer(dmac, dtype=np.uint8)
            o[0, 6:12] = np.frombuffer(smac, dtype=np.uint8)
            o[0, _OFF_TTL] = ttl - 1
            _ipv4_checksum(o, o.view(ROW_DTYPE)[:, 0])
            out.lens[out.n] = n
            out.ports[out.n] = port
            out.n += 1
            self.routed += 1
            self.outcomes["routed"] += 1


def _ipv4_checksum(o: np.ndarray, ov: np.ndarray) -> None:
    """Recompute the IPv4 header checksum of every row (ComputeChecksumImpl)."""
    ov["ip_csum"] = 0
    words = o[:, ETH: ETH + IP4].reshape(len(o), IP4 // 2, 2).astype(np.int64)
    s = (words[:, :, 0] << 8 | words[:, :, 1]).sum(axis=1)
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    ov["ip_csum"] = (~s) & 0xFFFF
