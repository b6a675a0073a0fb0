"""ThcSlot (``p4/v1model/include/control/thc_slot.p4``): the per-copy slot state machine
(round, state, contributor bitmap, distinct contributors, worker count and bitmap; two copies
per slot), packet by packet, and its vectorized form for batches of plain contributions."""

from __future__ import annotations

import time

import numpy as np

from host.protocol.layout import ROUND_MASK, ROUND_OLDER
from host.softswitch.config import (
    PRESENCE_ABSENT,
    PRESENCE_HEARD,
    PRESENCE_MASK,
    PRESENCE_MISS,
    Compiled,
)
from host.softswitch.controls.common import (
    ABSENT_AFTER,
    F_DEADLINE,
    F_PEEK,
    F_RESENT,
    F_RETX,
    F_START,
    IS_NORM,
    IS_SWITCH_TYPE,
    IS_UP,
    OUT_ANSWER,
    OUT_MULTICAST,
    OUT_UP,
    ST_COLLECTING,
    ST_EMPTY,
    ST_FINAL,
    ST_SENT_UP,
    Pending,
    R,
)


def _missed(pr: list[int], missing: int, silence_ns: int, now: int) -> None:
    """A deadline release without the ranks of ``missing`` at ``now`` (CLOCK_MONOTONIC, ns):
    count it for each; a rank missed :data:`ABSENT_AFTER` times in a row and not heard from for
    ``silence_ns`` or longer is held absent (``pr``: a :attr:`Compiled.presence` row)."""
    while missing:
        low = missing & -missing
        rk = low.bit_length() - 1
        pr[PRESENCE_MISS + rk] = m = min(pr[PRESENCE_MISS + rk] + 1, 255)
        if m >= ABSENT_AFTER and now - pr[PRESENCE_HEARD + rk] >= silence_ns:
            pr[PRESENCE_ABSENT] |= low
        missing ^= low


def _laps(ahead: int, st: int, tentative: int) -> bool:
    """Whether a contribution without ``START``, ``ahead`` (serially, 1..2^47-1) rounds newer
    than its non-empty copy (state ``st``), laps the others: a copy takes every other round of
    its slot and no honest rank sends round r+2 before round r's result, that is before the
    copy released round r. So anything but the next round (two on), or the next one while
    the copy still collects (or waits for its parent), comes from a member lapping the others
    (issue 33, 1: obeyed, it reset the copy and the others' rounds turned ``STALE``) or is far
    ahead (issue 16, H2). Dropped as ``AHEAD``; a session's first rounds carry ``START`` and
    open a copy at any round. One exception: a copy ``tentative`` (opened from empty: a new
    job, or a restart, whose repairs reopen copies at rounds nobody waits for any more) takes
    its next round before it released the one it holds (docs/protocol.md, "No lapping")."""
    return ahead != 2 or (st != ST_FINAL and not tentative)


def _heard(pr: list[int], rk: int, bit: int, fl: int, now: int) -> None:
    """A contribution of rank ``rk`` (after the round checks) at ``now``: present again, and
    heard from then. A first transmission that opens a slot copy for a session (START without
    RETX: not a retransmission, DEADLINE request or repair) also forgets who was absent, not the
    miss streaks: in a new session a rank is held absent again only after a deadline release of
    that session."""
    if fl & (F_START | F_RETX) == F_START:
        pr[PRESENCE_ABSENT] = 0
    pr[PRESENCE_ABSENT] &= ~bit
    pr[PRESENCE_MISS + rk] = 0
    pr[PRESENCE_HEARD + rk] = now


class ThcSlot:
    """Mixin of :class:`~host.softswitch.pipeline.Pipeline`: the slot registers' logic."""

    def state(self) -> dict[str, np.ndarray]:
        """Copies of the per-cell registers (tests, debugging)."""
        return {k: getattr(self, f"st_{k}").copy()
                for k in ("round", "state", "contrib", "nc", "cnt", "wb", "tent")}

    def _aggregate(self, b, v, L, ports, acc, reason, cfg: Compiled) -> None:
        """ThcSlot, ThcAccumulate, ThcEmit and ThcOutput for the accepted THC frames."""
        t = v["msg_type"][acc].astype(np.int64)
        jn = cfg.job_map[v["job_id"][acc].astype(np.int64)]
        kind = IS_NORM[t].astype(np.int64)
        job = cfg.job
        cell_a = (((job["slot_base"][jn] + v["slot"][acc]) << 2) | (kind << 1)
                  | v["slot_set"][acc].astype(np.int64))
        sw = IS_SWITCH_TYPE[t]
        bit_a = np.left_shift(1, v["rank"][acc].astype(np.int64))
        # what this packet adds: a worker adds itself; a child switch its count and bitmap
        acnt_a = np.where(sw, v["count"][acc], 1).astype(np.int64)
        awb_a = np.where(sw, v["bitmap"][acc].astype(np.int64), bit_a)
        # the 48-bit round (layout.ROUND_BITS): low 32 bits in round, high 16 in round_hi
        rnd_a = (v["round"][acc].astype(np.int64)
                 | (v["round_hi"][acc].astype(np.int64) << 32))
        flags_a = v["flags"][acc].astype(np.int64)
        up_a = IS_UP[t]
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
        c_tent = self.st_tent[uc].tolist()

        # the jobs' presence rows (Compiled.presence), written back after the batch
        pres = {jj: cfg.presence[jj].tolist() for jj in set(jn.tolist())}
        now = time.monotonic_ns()          # the batch's time: when its ranks were heard from
        rank_l = v["rank"][acc].tolist()
        pend = Pending()
        touched = pend.touched
        reads = pend.reads
        late: list[tuple[int, int]] = []           # (row, reason) decided here
        flush = self._flush
        adds = pend.adds
        outc = self.outcomes
        emits = pend.emits
        for row, c, x, r, up, bit, exp, hp, j, a_cnt, a_wb, p_cnt, p_bmp, fl, rk in zip(
                acc.tolist(), cell_a.tolist(), inv.tolist(), rnd_a.tolist(), up_a.tolist(),
                bit_a.tolist(), job["expected"][jn].tolist(), job["has_parent"][jn].tolist(),
                jn.tolist(), acnt, awb, pcnt, pbmp, flags_a.tolist(), rank_l, strict=True):
            st = c_state[x]
            if up:
                if fl & F_PEEK:
                    # status request: this copy's count/bitmap for this round; no state change
                    outc["peek"] += 1
                    if st == ST_EMPTY or c_round[x] != r:
                        emits.append((row, -1, OUT_ANSWER, 0, 0, F_PEEK, j))
                    else:
                        emits.append((row, -1, OUT_ANSWER, c_cnt[x], c_wb[x], F_PEEK, j))
                    continue
                fresh = from_empty = st == ST_EMPTY
                if not fresh and c_round[x] != r:
                    ahead = (r - c_round[x]) & ROUND_MASK
                    if ahead & ROUND_OLDER:  # serial-number arithmetic: older
                        late.append((row, R.STALE))
                        continue
                    if not fl & F_START and _laps(ahead, st, c_tent[x]):
                        late.append((row, R.AHEAD))      # far ahead (H2) or lapping (33)
                        continue
                    fresh = True
                pr = pres[j]
                _heard(pr, rk, bit, fl, now)
                if fresh:
                    cb = nc = cnt = wb = 0
                    st = ST_COLLECTING
                else:
                    cb, nc, cnt, wb = c_contrib[x], c_nc[x], c_cnt[x], c_wb[x]
                release = False
                if cb & bit:
                    # retransmission of a counted contribution: never counted twice
                    if st == ST_FINAL:
                        action, oflags = OUT_ANSWER, F_RESENT
                        outc["resent"] += 1
                    elif st == ST_SENT_UP:
                        action, oflags = OUT_UP, F_RETX | (fl & (F_DEADLINE | F_START))
                        outc["retx_up"] += 1
                    elif fl & F_DEADLINE:
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
                    emits.append((row, c, OUT_ANSWER, cnt, wb, F_RESENT, j))
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
                        c_tent[x] = int(from_empty)
                    ab = pr[PRESENCE_ABSENT]
                    release = (nc >= exp or bool(fl & F_DEADLINE)
                               or bool(ab and not pr[PRESENCE_MASK] & ~(cb | ab)))
                if release:
                    if fl & F_DEADLINE and nc < exp:
                        _missed(pr, pr[PRESENCE_MASK] & ~cb, self.absent_silence_ns, now)
                    if hp:
                        st = ST_SENT_UP
                        emits.append((row, c, OUT_UP, cnt, wb, fl & (F_DEADLINE | F_START), j))
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
        for jj, pr in pres.items():
            cfg.presence[jj] = pr
        self.st_round[uc], self.st_state[uc] = c_round, c_state
        self.st_contrib[uc], self.st_nc[uc] = c_contrib, c_nc
        self.st_cnt[uc], self.st_wb[uc] = c_cnt, c_wb
        self.st_tent[uc] = c_tent
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
        if not up.all() or (flags & (F_PEEK | F_DEADLINE)).any():
            return False
        if cfg.presence[np.unique(jn), PRESENCE_ABSENT:PRESENCE_HEARD].any():
            return False      # an absent rank or a miss to forget: the packet-by-packet logic
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
        diff = (R - cr) & ROUND_MASK
        ahead = diff < ROUND_OLDER
        fresh = (st == ST_EMPTY) | ((cr != R) & ahead)
        if ((st != ST_EMPTY) & ~ahead).any() or (~fresh & (st != ST_COLLECTING)).any():
            return False                                     # stale, or complete already
        if ((st != ST_EMPTY) & (cr != R) & ahead & ((diff != 2) | (st != ST_FINAL))).any():
            return False                        # far ahead or lapping: START decides (_laps)
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
        # every contributor heard from now (_heard; no START-without-RETX here: none absent)
        cfg.presence[jn, PRESENCE_HEARD + v["rank"][acc].astype(np.int64)] = time.monotonic_ns()
        cnt = np.where(fresh, 0, self.st_cnt[ucell]) + np.add.reduceat(acnt[order], starts)
        wb = np.where(fresh, 0, self.st_wb[ucell]) | np.bitwise_or.reduceat(awb[order], starts)
        complete = nc >= exp
        hp = cfg.job["has_parent"][jn[order][starts]] != 0
        self.st_round[ucell] = R
        self.st_tent[ucell] = np.where(fresh, st == ST_EMPTY, self.st_tent[ucell])
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
            e[:, 5] = np.where(hp[done], flags[order][last] & F_START, 0)   # as the slow path
            e[:, 6] = jn[order][last]
            self._emit(b, v, e, cfg)
        return True
