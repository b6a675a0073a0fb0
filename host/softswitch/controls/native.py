"""The software target's common case in C (``host/softswitch/_fastpath.c``): a batch of one
job's contributions, partials of child switches and results of its parent (with or without
DEADLINE), checked, added, released and emitted packet by packet as the numpy path does. The
extension includes the generated ``host/protocol/netco_layout.h``; one built against another
header is refused (:func:`_native_enabled`)."""

from __future__ import annotations

import os

import numpy as np

from host.protocol import generated_dataplane as dp
from host.protocol import layout as lay
from host.softswitch.config import Compiled
from host.softswitch.controls import thc_members
from host.softswitch.controls.common import (
    ABSENT_AFTER,
    NO_PORTS,
    OFF_JOB,
    RESULT_TTL,
    ROW,
    Counters,
    R,
    T,
)

try:
    from host.softswitch import _fastpath
except ImportError:  # built without a C compiler: the numpy/Python path only
    _fastpath = None


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
#: The totals the C switch loop keeps (``_fastpath.LOOP_STATS``), by name -> index.
LOOP_STATS = {name: i for i, name in enumerate(getattr(_fastpath, "LOOP_STATS", ()))}
_NATIVE_CONSTS = (lay.THC_VERSION, int(T.DATA), lay.INDEX_BITS, int(T.RESULT), lay.RANK_ALL,
                  int(lay.THC_UDP_PORT), lay.MAX_WORKERS, RESULT_TTL, ABSENT_AFTER)


def native_job(cfg: Compiled, jn: int, counters: Counters | None = None) -> tuple | None:
    """The job ``jn`` of ``cfg`` as ``_fastpath`` takes it (cached on ``cfg``), or ``None``
    when it has no THC table (not the C path's case); with ``counters``, the job's row of
    ``rank_contributions`` for the C path to count into."""
    if jn < 0 or jn >= len(cfg.has_table) - 1 or not cfg.has_table[jn]:
        return None
    nat = getattr(cfg, "_native", None)
    if nat is None:
        nat = cfg._native = {}  # type: ignore[attr-defined]
    per_job = nat.get(jn)
    if per_job is None:
        job = cfg.job
        gports = np.ascontiguousarray(cfg.groups.get(int(job["mcast_grp"][jn]), NO_PORTS),
                                      dtype=np.int64)
        hit = np.zeros(len(gports), dtype=np.uint8)
        mac = np.zeros((len(gports), 6), dtype=np.uint8)
        addr = np.zeros(len(gports), dtype=np.uint32)
        if cfg.member_keys.size and len(gports):   # ThcMembers, as _emit looks it up
            h, pos = thc_members.lookup(cfg, cfg.job_id[np.full(len(gports), jn)], gports)
            hit[h] = 1
            mac[h] = cfg.member_mac[pos[h]]
            addr[h] = cfg.member_addr[pos[h]]
        params = tuple(int(job[p][jn]) for p in ("slot_base", "num_slots", "expected",
                                                 "has_parent", "lane_bits", "self_addr",
                                                 "index", "token"))
        # a job's place in a tree: where its partials go, its id as a child
        tree = tuple(int(job[p][jn]) for p in ("parent_port", "parent_addr", "self_id"))
        # the presence row is a view: the C path writes it in place (Compiled.presence)
        per_job = nat[jn] = (int(cfg.job_id[jn]), jn, params, np.ascontiguousarray(cfg.lut[jn]),
                             gports, hit, mac, addr, cfg.presence[jn], tree)
    if counters is None:
        return per_job
    return (*per_job, counters.rank_row(int(cfg.job["index"][jn])))


def native_jobs(cfg: Compiled, counters: Counters | None = None) -> tuple:
    """Every job of ``cfg`` (by job number, at most ``MAX_JOBS``) for ``_fastpath.loop``."""
    return tuple(native_job(cfg, jn, counters)
                 for jn in range(min(len(cfg.has_table) - 1, dp.MAX_JOBS)))


class NativePath:
    """Mixin of :class:`~host.softswitch.pipeline.Pipeline`: :meth:`_native`."""

    def native_consts(self) -> tuple:
        """The protocol constants as ``_fastpath`` takes them, with this pipeline's
        ``absent_silence_ns``."""
        return (*_NATIVE_CONSTS, self.absent_silence_ns)

    def native_state(self, cfg: Compiled) -> tuple:
        """The aggregation state and sender table as ``_fastpath`` takes them."""
        return (np.ascontiguousarray(cfg.sender_keys, dtype=np.uint64),
                np.ascontiguousarray(cfg.sender_is_switch, dtype=np.uint8),
                np.ascontiguousarray(cfg.sender_port, dtype=np.uint16), self.pool_slots,
                self.coords,
                (self.st_round, self.st_state, self.st_contrib, self.st_nc, self.st_cnt,
                 self.st_wb, self.st_tent), self.sums)

    def _native(self, buf, lens, ports, n: int, stamps, cfg: Compiled) -> bool:
        """The whole batch through ``_fastpath`` (see the module docstring); ``False``: not
        its case, nothing changed. Sets :attr:`accepted` to the rows the C path accepted."""
        if _fastpath is None or buf.dtype != np.uint8 or buf.shape[1] != ROW:
            return False
        job_id = (int(buf[0, OFF_JOB]) << 8) | int(buf[0, OFF_JOB + 1])
        job = native_job(cfg, int(cfg.job_map[job_id]), self.counters)
        if job is None:
            return False
        out = self.out
        out.reserve(n * max(1, len(job[4])))
        order = None
        if stamps is not None and n > 1:
            order = np.argsort(stamps[:n], kind="stable").astype(np.int64)
        lens64 = lens if lens.dtype == np.int64 else lens.astype(np.int64)
        ports64 = ports if ports.dtype == np.int64 else ports.astype(np.int64)
        acc = getattr(self, "_acc_buf", None)
        if acc is None or len(acc) < n:
            acc = self._acc_buf = np.zeros(max(n, 1024), dtype=np.int64)
        res = _fastpath.process(buf, lens64, ports64, n, order, job, self.native_state(cfg),
                                self.native_consts(), (out.buf, out.lens, out.ports), acc)
        if res is None:
            return False
        (nout, ncontrib, nresults, nacc, nresent, nretx_up, nrelease, nparent, nstale, ndup,
         nahead) = res
        self.accepted = acc[:nacc].copy()
        index = job[2][6]
        c = self.counters
        if 0 <= index < c.contributions.size:
            c.contributions[index] += ncontrib
        if 0 <= index < c.results.size:
            c.results[index] += nresults
        if 0 <= index < c.resent.size:
            c.resent[index] += nresent
        c.drops[R.STALE] += nstale
        c.drops[R.DUPLICATE] += ndup
        c.drops[R.AHEAD] += nahead
        for name, k in (("contribution", ncontrib), ("resent", nresent), ("retx_up", nretx_up),
                        ("release", nrelease), ("parent_result", nparent)):
            if k:
                self.outcomes[name] += k
        out.n = nout
        self.tx += nout
        out.order = np.argsort(out.ports[:nout], kind="stable")
        self.native_batches += 1
        return True
