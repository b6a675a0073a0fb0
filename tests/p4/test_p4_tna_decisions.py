"""The TNA program's slot decisions, table by table, against the software target's rules.

There is no Tofino model here, so nothing runs packets through p4/tna. What can be checked is
the logic: the TNA program turns the v1model slot state machine into two constant tables,
``ThcDecide.modes`` (pass 0: drop, or what happens to the words and the count registers) and
``ThcSlotCount.completion`` (pass 1: release, absorb, answer, resend up). This test reads their
``const entries`` from the P4 source, evaluates them the way the hardware matches them (first
matching entry wins, ``_`` matches anything) for every reachable combination of cell state
and packet, and compares the outcome with the software target's per-packet rules
(host/softswitch/pipeline.py, which the BMv2 tests hold to the v1model program).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from host.paths import REPO

P4 = REPO / "p4"


def _constants() -> dict[str, int]:
    """Every ``const bit<N> NAME = value;`` and integer ``#define`` the TNA program sees."""
    out: dict[str, int] = {}
    files = [*sorted((P4 / "shared").glob("*.p4")), P4 / "tna/include/target.p4",
             *sorted((P4 / "tna/include/control").glob("*.p4"))]
    for f in files:
        text = f.read_text()
        for name, val in re.findall(r"const\s+bit<\d+>\s+(\w+)\s*=\s*([0-9a-fA-Fx]+)\s*;", text):
            out[name] = int(val, 0)
        for name, val in re.findall(r"^#define\s+(\w+)\s+(\d+)\s*$", text, flags=re.M):
            out[name] = int(val)
    return out


C = _constants()


def _value(tok: str) -> int | None:
    tok = tok.strip()
    if tok == "_":
        return None
    if tok in ("true", "false"):
        return int(tok == "true")
    return int(eval(tok, {"__builtins__": {}}, C))   # names, ints and "A | B" only


def const_entries(path: Path, table: str) -> list[tuple[tuple[int | None, ...], str, tuple[int, ...]]]:
    """``table``'s const entries in ``path``: (key values or None for ``_``, action, args)."""
    text = re.sub(r"//[^\n]*", "", path.read_text())
    m = re.search(r"table\s+" + table + r"\s*\{.*?const entries\s*=\s*\{(.*?)\n\s*\}\s*\n\s*\}",
                  text, flags=re.S)
    assert m, f"{table} not found in {path}"
    out = []
    for keys, action, args in re.findall(r"\(([^()]*)\)\s*:\s*(\w+)\(([^()]*)\)\s*;", m.group(1)):
        key = tuple(_value(k) for k in keys.split(","))
        vals = tuple(_value(a) for a in args.split(",")) if args.strip() else ()
        out.append((key, action, vals))
    return out


def lookup(entries, key: tuple[int, ...]):
    for k, action, args in entries:
        if all(e is None or e == v for e, v in zip(k, key, strict=True)):
            return action, args
    return None


MODES = const_entries(P4 / "tna/include/control/thc_decide.p4", "modes")
COMPLETION = const_entries(P4 / "tna/include/control/thc_slot.p4", "completion")


def test_the_tables_were_read():
    assert len(MODES) >= 10 and len(COMPLETION) >= 15
    assert all(len(k) == 8 for k, _, _ in MODES)
    assert all(len(k) == 5 for k, _, _ in COMPLETION)


def tna(used, same_round, newer, st, counted, nc, expected, is_up, peek, deadline, kind,
        has_parent):
    """What p4/tna does: pass 0 registers + modes, pass 1 registers + completion."""
    V_STALE, V_SAME, V_FRESH = C["V_STALE"], C["V_SAME"], C["V_FRESH"]
    # pass 0 (ThcSlotOpen): the round register and the used flag
    if is_up and not peek:
        # serial-number compare; a never-used cell holds 0, which a round in the upper half
        # of the number space (newer = 0 here) counts as newer than itself
        verdict = V_SAME if used and same_round else (V_FRESH if newer else V_STALE)
        used_v = used
    else:
        verdict = V_SAME if used and same_round else V_STALE
        used_v = 1
    fresh = verdict == V_FRESH or used_v == 0
    if fresh:
        state, dup_bits = C["ST_COLLECTING"], 0
    elif verdict == V_SAME:
        state = st
        dup_bits = 1 if (is_up and not peek and counted) else 0
    else:
        state, dup_bits = 0, 0
    hit = lookup(MODES, (verdict, used_v, state, dup_bits, deadline, kind, is_up, peek))
    if hit is None or hit[0] in ("stale", "duplicate"):
        return ("drop", "STALE" if hit is None or hit[0] == "stale" else "DUPLICATE")
    acc_mode, count_op, write_round = hit[1]
    # pass 1 (ThcSlotCount): the countdown
    remaining = 0
    if count_op == C["CNT_FIRST"]:
        remaining = expected - 1
    elif count_op == C["CNT_ADD"]:
        remaining = expected - (nc + 1)
    new_state, out_action, out_flags = lookup(
        COMPLETION, (count_op, remaining, deadline, has_parent, state))[1]
    counted_now = count_op in (C["CNT_FIRST"], C["CNT_ADD"])
    # the cell's round register holds this round afterwards (pass 0 or pass 1 wrote it)
    opened = count_op == C["CNT_FIRST"] and (verdict == V_FRESH or write_round == 1)
    # a status answer carries the copy's count/bitmap, or zeros for another round
    peek_read = count_op == C["CNT_PEEK"]
    return ("out", out_action, out_flags, new_state or None, acc_mode, counted_now, opened,
            peek_read)


def reference(used, same_round, newer, st, counted, nc, expected, is_up, peek, deadline,
              kind, has_parent):
    """The software target's rules (host/softswitch/pipeline.py, _aggregate)."""
    OUT_ANSWER, OUT_UP, OUT_MULTICAST, OUT_ABSORB = (C["OUT_ANSWER"], C["OUT_UP"],
                                                     C["OUT_MULTICAST"], C["OUT_ABSORB"])
    F_RETX, F_RESENT, F_DEADLINE, F_PEEK = (C["FLAG_RETX"], C["FLAG_RESENT"], C["FLAG_DEADLINE"],
                                            C["FLAG_PEEK"])
    ST_COLLECTING, ST_SENT_UP, ST_FINAL = C["ST_COLLECTING"], C["ST_SENT_UP"], C["ST_FINAL"]
    add = C["ACC_ADD"] if kind == C["KIND_DATA"] else C["ACC_MAX"]
    READ, STORE, NONE = C["ACC_READ"], C["ACC_STORE"], C["ACC_NONE"]
    fl_dead = F_DEADLINE if deadline else 0
    if not used:
        st = C["ST_EMPTY"]
    if is_up:
        if peek:
            same = bool(used and same_round)
            return ("out", OUT_ANSWER, F_PEEK, None, NONE, False, False, same)
        fresh = st == C["ST_EMPTY"]
        if not fresh and not same_round:
            if not newer:
                return ("drop", "STALE")
            fresh = True
        if fresh:
            st, counted, nc = ST_COLLECTING, False, 0
        if counted:
            if st == ST_FINAL:
                return ("out", OUT_ANSWER, F_RESENT, None, READ, False, False, False)
            if st == ST_SENT_UP:
                return ("out", OUT_UP, F_RETX | fl_dead, None, READ, False, False, False)
            if not deadline:
                return ("drop", "DUPLICATE")
            word, release, now = READ, True, False
        elif st == ST_FINAL:
            return ("out", OUT_ANSWER, F_RESENT, None, READ, False, False, False)
        elif st != ST_COLLECTING:
            return ("drop", "STALE")
        else:
            word, now = (STORE if fresh else add), True
            release = nc + 1 >= expected or bool(deadline)
        opened = bool(fresh)
        if not release:
            return ("out", OUT_ABSORB, 0, None, word, now, opened, False)
        if has_parent:
            return ("out", OUT_UP, fl_dead, ST_SENT_UP, word, now, opened, False)
        return ("out", OUT_MULTICAST, 0, ST_FINAL, word, now, opened, False)
    if used and same_round and st in (ST_SENT_UP, ST_FINAL):
        return ("out", OUT_MULTICAST, 0, ST_FINAL, STORE, False, False, False)
    return ("drop", "STALE")


def scenarios():
    """Every reachable (cell, packet) combination, v1model/softswitch invariants respected."""
    sts = (C["ST_COLLECTING"], C["ST_SENT_UP"], C["ST_FINAL"])
    for used, expected, is_up, peek, deadline, kind, has_parent in itertools.product(
            (0, 1), (1, 2, 3), (0, 1), (0, 1), (0, 1), (C["KIND_DATA"], C["KIND_NORM"]), (0, 1)):
        if not is_up and peek:
            continue
        if not used:
            for newer in (0, 1):
                yield (0, 0, newer, 0, 0, 0, expected, is_up, peek, deadline, kind, has_parent)
            continue
        for (same, newer), st, counted, nc in itertools.product(
                ((1, 0), (0, 1), (0, 0)), sts, (0, 1), range(expected + 1)):
            if st == C["ST_COLLECTING"] and nc >= expected:
                continue                 # a complete copy is released
            if counted and nc == 0:
                continue                 # counted means in the count
            if st != C["ST_COLLECTING"] and nc == 0 and not counted:
                continue
            yield (1, same, newer, st, counted, nc, expected, is_up, peek, deadline, kind,
                   has_parent)


SCENARIOS = list(scenarios())


def test_enough_scenarios():
    assert len(SCENARIOS) > 1000


@pytest.mark.parametrize("chunk", range(8))
def test_tna_decisions_match_the_software_target(chunk):
    bad = []
    for sc in SCENARIOS[chunk::8]:
        got, want = tna(*sc), reference(*sc)
        if got != want:
            bad.append((sc, got, want))
    assert not bad, "\n".join(f"{s}: tna {g} != reference {w}" for s, g, w in bad[:10])
