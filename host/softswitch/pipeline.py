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

Everything is done in the same order the P4 program does it, one module per control under
:mod:`host.softswitch.controls` (mirroring ``p4/v1model/include/control/``); this module only
applies them in ``main.p4``'s order. Differences are listed in ``docs/softswitch.md``.

The common case — a batch of one job's worker contributions (4-bit indices), child switches'
partials and the parent's results, with or without DEADLINE — runs in C when the extension
``_fastpath`` is built (``_fastpath.c``: the same checks, slot logic, accumulation, drops and
output frames, packet by packet); any other batch (norms, status requests, validation drops,
routing), or ``NETCO_SOFTSWITCH_C=0``, takes the numpy/Python path below, which stays the
reference.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from host.protocol import generated_dataplane as dp
from host.protocol import layout as lay
from host.protocol.jobs import width_problem
from host.softswitch.config import Compiled
from host.softswitch.controls.common import (
    ABSENT_SILENCE,
    PAY_OFF,
    ROW,
    ROW_DTYPE,
    ROW_DTYPE_HDR,
    THC_OFF,
    Counters,
    Outputs,
    R,
    payload_tables,
)
from host.softswitch.controls.drop_accounting import account_drops
from host.softswitch.controls.native import LOOP_STATS, NATIVE, NativePath, _fastpath
from host.softswitch.controls.parser import parse
from host.softswitch.controls.routing import Routing
from host.softswitch.controls.thc_accumulate import ThcAccumulate
from host.softswitch.controls.thc_load import ThcLoad
from host.softswitch.controls.thc_output import ThcOutput
from host.softswitch.controls.thc_slot import ThcSlot
from host.softswitch.controls.thc_validate import ThcValidate

__all__ = ["NATIVE", "PAY_OFF", "ROW", "ROW_DTYPE", "THC_OFF", "Counters", "Outputs", "Pipeline",
           "_fastpath"]


class _LoopCounter:
    """A frame counter of a :class:`Pipeline`: its own count (``_<name>``) plus the C switch
    loop's (``live``); setting it sets the pipeline's part so that the sum is the value set."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.own = name, "_" + name

    def __get__(self, obj: Pipeline | None, objtype: type | None = None) -> int:
        if obj is None:
            return self  # type: ignore[return-value]
        return getattr(obj, self.own) + obj._live(self.name)

    def __set__(self, obj: Pipeline, value: int) -> None:
        setattr(obj, self.own, value - obj._live(self.name))


class Pipeline(NativePath, ThcValidate, ThcLoad, ThcSlot, ThcAccumulate, ThcOutput, Routing):
    """Aggregation state and the per-batch processing of the netco v1model program.

    Parameters
    ----------
    pool_slots : int
        Slots shared by all jobs (``THC_SLOTS`` of ``p4/v1model/include/size.p4``); each has
        two copies for data and two for norms, a row of ``coords`` 32-bit sums each (data
        copies keep their sums as wide as their job's lanes in it: :meth:`sums_for`).
    counters : Counters
        Counter arrays to add to (bound to the P4Runtime store by the switch).
    coords : int
        The packet width: coordinates per DATA, RESULT and PARTIAL (``layout.PACKET_WIDTHS``;
        the P4 programs' is ``COORDS_PER_PACKET``; docs/protocol.md, "Packet width").
    """

    def __init__(self, pool_slots: int = dp.THC_SLOTS, counters: Counters | None = None,
                 coords: int = lay.COORDS_PER_PACKET, absent_silence: float = ABSENT_SILENCE) -> None:
        why = width_problem(coords)
        if why is not None:
            raise ValueError(f"coords={why}")
        self.pool_slots = pool_slots
        self.coords = coords
        #: how long a rank's deadline misses must last before it is held absent (ns; tests: 0)
        self.absent_silence_ns = int(absent_silence * 1e9)
        #: (msg_type, lane_bits) -> payload bytes at this width (-1: undefined)
        self.payload_bytes = payload_tables(coords)[0]
        cells = pool_slots * 4
        self.sums = np.zeros((cells, coords), dtype=np.uint32)
        # a copy's data sums are as wide as its job's lanes, packed at the start of its row
        # (see sums_for); norms and 32-bit lanes use the rows as they are
        self._sums_by_lane = {8: self.sums.view(np.uint8)[:, :coords],
                              16: self.sums.view(np.uint16)[:, :coords], 32: self.sums}
        # per-cell registers of thc_slot.p4: round, state, contributor bitmap, distinct
        # contributors, worker count and worker bitmap (int64 so bit 31 never overflows)
        self.st_round = np.zeros(cells, dtype=np.int64)
        self.st_state = np.zeros(cells, dtype=np.int64)
        self.st_contrib = np.zeros(cells, dtype=np.int64)
        self.st_nc = np.zeros(cells, dtype=np.int64)
        self.st_cnt = np.zeros(cells, dtype=np.int64)
        self.st_wb = np.zeros(cells, dtype=np.int64)
        # 1 while a copy holds a round it was opened at from empty (a new job, a restart):
        # only such a copy may be moved on to its next round before it released this one
        # (docs/protocol.md, "No lapping")
        self.st_tent = np.zeros(cells, dtype=np.int64)
        #: use the vectorized path for batches of plain contributions (tests switch it off)
        self.fast = True
        #: try the C fast path first (with ``fast``; tests switch it off to compare)
        self.native = NATIVE
        #: batches the C fast path handled (software-only)
        self.native_batches = 0
        #: the controller's configuration; the control plane swaps it in whole, the data plane
        #: takes it through :meth:`take_cfg`
        self.cfg = Compiled()
        #: the lane width each cell's data sums are kept at (0: never written at any width;
        #: norms cells stay 0: their rows are always 32-bit)
        self.cell_lanes = np.zeros(cells, dtype=np.uint8)
        self._taken: Compiled | None = None
        #: data cells whose sums were repacked to a new lane width (software-only)
        self.repacked_cells = 0
        self.counters = counters or Counters.empty()
        self.out = Outputs(256)   # initial capacity (grows)
        #: totals the C switch loop adds to as it runs (rx, tx, contributions; LOOP_STATS)
        self.live = np.zeros(max(len(LOOP_STATS), 1), dtype=np.int64)
        #: software-only totals: frames in, frames out (both with the C loop's), frames routed
        self._rx = 0
        self._tx = 0
        self.routed = 0
        #: rows of the last batch that passed validation (job, sender, well-formed), as the
        #: numpy path or the C fast path reports them. The switch learns reply addresses from
        #: these rows only (issue 16, H1).
        self.accepted: np.ndarray = np.zeros(0, dtype=np.int64)
        #: what happened to every frame that was not dropped (software-only): contribution,
        #: resent, peek, retx_up, release (deadline without adding), parent_result, routed
        self.outcomes: Counter[str] = Counter()

    def sums_for(self, lane_bits: int) -> np.ndarray:
        """The sums of data copies whose job has ``lane_bits``-bit lanes: a ``(cells,
        coords)`` view of :attr:`sums` as wide as the lanes (uint8, uint16 or uint32), each
        copy's sums packed at the start of its row, in this machine's byte order.

        A result carries its sums truncated to the lanes (THC step 10), and truncation commutes
        with addition, so sums kept modulo 2^lane_bits give the same bytes on the wire while the
        additions touch a half or a quarter of the memory. The C fast path keeps them the same
        way (``_fastpath.c``); norms copies keep their 32-bit rows.
        """
        return self._sums_by_lane[lane_bits]

    def take_cfg(self) -> Compiled:
        """The configuration to process the next frames with, its jobs' sums at their lanes.

        Data sums are kept as wide as their job's lanes (:meth:`sums_for`); a controller that
        rewrites a job's ``lane_bits`` would otherwise have the sums already kept (a round still
        filling, a finished round answered again to a retransmission) reread at the wrong
        width. So the first time the data plane takes a new configuration, every data cell of
        every job whose lanes differ from the width its sums were kept at is repacked to the
        job's width: what BMv2's 32-bit registers truncated to the new lanes would give (exact
        while the old lanes held the sums, as the controller's ``lane_problem`` check of
        ``lane_bits`` against n·g ensures; THC step 10, docs/protocol.md "Lane width").
        Called by the data plane's thread only (the control plane swaps :attr:`cfg` whole).
        """
        cfg = self.cfg
        if cfg is self._taken:
            return cfg
        job = cfg.job
        for jn in range(len(cfg.job_id) - 1):
            lanes = int(job["lane_bits"][jn])
            if lanes not in self._sums_by_lane:
                continue                        # refused when written; never summed
            slots = int(job["slot_base"][jn]) + np.arange(int(job["num_slots"][jn]))
            cells = np.concatenate([slots << 2, (slots << 2) | 1])   # the two data copies
            cells = cells[cells < len(self.cell_lanes)]
            kept = self.cell_lanes[cells]
            for w in np.unique(kept[(kept != 0) & (kept != lanes)]).tolist():
                move = cells[kept == w]
                vals = self._sums_by_lane[w][move].astype(np.uint32)   # zero-extend or
                self.sums[move] = 0                                     # truncate below
                self._sums_by_lane[lanes][move] = vals.astype(self._sums_by_lane[lanes].dtype)
                self.repacked_cells += len(move)
            self.cell_lanes[cells] = lanes
        self._taken = cfg
        return cfg

    def _live(self, name: str) -> int:
        k = LOOP_STATS.get(name)
        return int(self.live[k]) if k is not None else 0

    #: Frames received (this pipeline's and the C switch loop's).
    rx = _LoopCounter()
    #: Frames sent (this pipeline's and the C switch loop's).
    tx = _LoopCounter()

    def all_outcomes(self) -> dict[str, int]:
        """:attr:`outcomes` with the ones the C switch loop added."""
        got = dict(self.outcomes)
        for name, live in (("contribution", "contributions"), ("resent", "resent"),
                           ("retx_up", "retx_up"), ("release", "release"),
                           ("parent_result", "parent_result")):
            c = self._live(live)
            if c:
                got[name] = got.get(name, 0) + c
        return got

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
            self.accepted = np.zeros(0, dtype=np.int64)
            return out
        cfg = self.take_cfg()
        self.rx += n
        self.accepted = np.zeros(0, dtype=np.int64)
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

        thc, routable = parse(v, L)                                   # ThcParser
        reason = np.zeros(n, dtype=np.int64)
        if thc.any():
            self._validate(v, L, ports, thc, reason, cfg)             # ThcValidate, ThcLoad
            self._check_values(b, v, thc, reason, cfg)                # values <= g (target only)
        reason[~thc & ~routable] = R.NOT_IPV4
        acc = np.flatnonzero(thc & (reason == 0))
        self.accepted = acc
        if stamps is not None and acc.size > 1:
            acc = acc[np.argsort(stamps[acc], kind="stable")]
        if acc.size:   # ThcSlot, ThcAccumulate, ThcEmit, ThcOutput (ThcMembers at egress)
            self._aggregate(b, v, L, ports, acc, reason, cfg)
        rt = np.flatnonzero(routable)
        if rt.size:
            self._route(b, L, rt, reason, cfg)                        # Routing
        account_drops(self.counters, reason)                          # DropAccounting
        self.tx += out.n
        out.order = np.argsort(out.ports[: out.n], kind="stable")
        return out
