"""The fallback P4Info (machines without the compiled one) must describe the same program as
the committed compiler output: tables, match fields, actions, parameters, counters."""

from __future__ import annotations

import pytest

from host.softswitch.config import check_program
from host.softswitch.entities import EntityStore
from host.softswitch.p4info import COMPILED_P4INFO, P4InfoIndex, fallback_p4info, load_p4info


def _shape(info) -> dict:
    idx = P4InfoIndex(info)
    tables = {}
    for t in idx.tables.values():
        fields = sorted((f.name, f.bitwidth, f.match_type) for f in t.fields.values())
        acts = sorted((idx.actions[a].name, scope) for a, scope in t.actions.items())
        tables[t.name] = (fields, acts, t.size)
    actions = {a.name: sorted(a.params.values()) for a in idx.actions.values()}
    counters = {c.name: c.size for c in idx.counters.values()}
    return {"tables": tables, "actions": actions, "counters": counters}


@pytest.mark.skipif(not COMPILED_P4INFO.exists(), reason="no compiled P4Info committed")
def test_fallback_matches_the_compiled_p4info():
    want, got = _shape(load_p4info(COMPILED_P4INFO)), _shape(fallback_p4info())
    assert got["tables"] == want["tables"]
    assert got["counters"] == want["counters"]
    for name, params in got["actions"].items():
        assert want["actions"].get(name) == params, name


@pytest.mark.parametrize("make", [fallback_p4info, lambda: load_p4info(COMPILED_P4INFO)])
def test_the_data_plane_finds_what_it_needs(make):
    if make is not fallback_p4info and not COMPILED_P4INFO.exists():
        pytest.skip("no compiled P4Info committed")
    assert check_program(EntityStore(P4InfoIndex(make()))) == []
