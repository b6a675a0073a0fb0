"""The TNA program (p4/tna): generated code, committed Tofino outputs, one controller for both.

Without the Tofino backend these tests check what is committed (P4Info of the compiled TNA
program against the v1model P4Info; the controller's entries encode against both P4Infos).
With it (``tofino`` marker) the program is compiled for tofino and tofino2 and must reproduce
the committed P4Info. There is no Tofino model here: nothing runs packets through the TNA
program (p4/README.md lists what was checked and what was not).
"""

from __future__ import annotations

import importlib.util
import json
import re
import tempfile
from pathlib import Path

import finsy as fy
import pytest
from finsy.proto import p4i

from control_plane.config import ConfigError, parse_config
from control_plane.desired import desired_state, parse_p4info_text
from control_plane.p4names import pipeline_prefix, program_view
from host.paths import REPO, V1MODEL_P4INFO
from host.protocol import generated_dataplane as dp
from host.protocol import layout as lay

V1_P4INFO = V1MODEL_P4INFO
TNA = ("tofino", "tofino2")
#: v1model objects the TNA program does not have, and why (p4/README.md, "Tofino").
V1_ONLY_TABLES = {"ingress.thc_load.tables"}   # workers send table values: no lookup
#: counters of the v1model program the TNA program does not have: the rate limit's trips
#: (issue 33, 4: its four register arrays need stateful ALUs the 12 stages do not have left)
V1_ONLY_COUNTERS = {"ingress.rate_limit.trips"}


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BUILD = _load("netco_p4_build_tna", REPO / "p4" / "build.py")
GEN = _load("netco_p4_gen_tna", REPO / "p4" / "gen.py")


def read_p4info(path: Path) -> p4i.P4Info:
    return parse_p4info_text(path.read_text())



def tna_p4info(target: str) -> p4i.P4Info:
    path = BUILD.tna_dir(target) / "netco.p4info.txtpb"
    if not path.exists():
        pytest.skip(f"{path.relative_to(REPO)} not committed yet: compile with "
                    f"`make -C p4 {target}` where the Tofino backend is installed")
    return read_p4info(path)


def test_per_target_constants_cover_a_packet():
    k = GEN.tna_constants()
    lanes = 32 // lay.VALUE_BITS
    assert k["TNA_WORDS_PER_PASS"] * k["TNA_PASSES"] * lanes >= lay.COORDS_PER_PACKET
    assert k["TNA_WORDS_PER_PASS"] * 32 >= lay.NORMS.count * lay.NORMS.bits
    assert k["THC_SLOTS"] == 1 << k["THC_SLOT_BITS"]
    assert k["THC_CELLS"] == 4 * k["THC_SLOTS"]
    assert k["THC_WORD_REGISTERS"] == k["TNA_PASSES"] * k["THC_CELLS"]
    words = (REPO / "p4/tna/include/control/generated_words_apply.p4").read_text()
    assert words.count(".apply(") == k["TNA_WORDS_PER_PASS"]


def size_drift(target_p4: Path) -> list[str]:
    """The shared sizes (``p4/shared/size.p4``) that ``target_p4`` restates instead of taking
    them from the shared file, as lines naming the value and the shared one."""
    tna, shared = GEN.tna_constants(target_p4), GEN.shared_sizes()
    return [f"{n} = {tna[n]} restated; p4/shared/size.p4 has {shared[n]}"
            for n in sorted(set(tna) & set(shared))]


def test_shared_sizes_are_the_generated_ones():
    shared = GEN.shared_sizes()
    assert {"MAX_JOBS", "SENDERS_TABLE_SIZE", "MEMBERS_TABLE_SIZE", "ROUTES_TABLE_SIZE"} <= set(shared)
    assert all(getattr(dp, n) == v for n, v in shared.items())


def test_tna_takes_the_shared_sizes():
    """``p4/tna/include/target.p4`` keeps only what is Tofino's own (slot pool, passes,
    recirculation port); the table sizes both programs share come from ``p4/shared/size.p4``,
    which both ``main.p4`` include, so they cannot drift (issue 15; checked without a compiler)."""
    assert size_drift(GEN.TNA_TARGET) == [], "p4/tna/include/target.p4 restates shared sizes"
    assert size_drift(GEN.SIZE_P4) == [], "p4/v1model/include/size.p4 restates shared sizes"
    for main in (REPO / "p4/tna/main.p4", REPO / "p4/v1model/main.p4"):
        includes = re.findall(r'^#include "([^"]+)"', main.read_text(), flags=re.M)
        assert "../shared/size.p4" in includes, f"{main.relative_to(REPO)} must include it"


def test_tna_size_check_sees_a_restated_size(tmp_path):
    drifted = tmp_path / "target.p4"
    text = GEN.TNA_TARGET.read_text()
    drifted.write_text(text.replace("#define TNA_PASSES 2\n",
                                    f"#define TNA_PASSES 2\n#define MAX_JOBS {dp.MAX_JOBS * 2}\n"))
    assert size_drift(drifted) == [
        f"MAX_JOBS = {dp.MAX_JOBS * 2} restated; p4/shared/size.p4 has {dp.MAX_JOBS}"]


def test_generated_p4_is_fresh():
    assert GEN.main(["--check"]) == 0, "run `make -C p4 gen` (p4/gen.py) and commit"


def _by_name(items) -> dict:
    return {x.preamble.name: x for x in items}


def _params(action) -> list:
    return [(p.name, p.bitwidth) for p in action.params]


def _fields(table) -> list:
    return [(f.name, f.bitwidth, f.match_type) for f in table.match_fields]


@pytest.mark.parametrize("target", TNA)
def test_tna_p4info_keeps_the_v1model_names(target):
    # The Tofino compiler prefixes names with the pipeline ("pipe."); the controller works
    # with the program's names (control_plane.p4names.program_view).
    raw = tna_p4info(target)
    assert pipeline_prefix(raw) == "pipe."
    v1, tna = read_p4info(V1_P4INFO), program_view(raw)
    v1_tables, tna_tables = _by_name(v1.tables), _by_name(tna.tables)
    missing = set(v1_tables) - set(tna_tables)
    assert missing == V1_ONLY_TABLES, f"v1model tables without a TNA twin: {missing}"
    v1_actions, tna_actions = _by_name(v1.actions), _by_name(tna.actions)
    v1_ids = {a.preamble.id: a.preamble.name for a in v1.actions}
    tna_ids = {a.preamble.id: a.preamble.name for a in tna.actions}
    for name, t in v1_tables.items():
        if name in V1_ONLY_TABLES:
            continue
        u = tna_tables[name]
        assert _fields(u) == _fields(t), name
        assert u.size == t.size, name
        want = sorted(v1_ids[a.id] for a in t.action_refs)
        got = sorted(tna_ids[a.id] for a in u.action_refs)
        assert got == want, name
        for a in want:
            assert _params(tna_actions[a]) == _params(v1_actions[a]), a
    v1_counters = {c.preamble.name: c.size for c in v1.counters
                   if c.preamble.name not in V1_ONLY_COUNTERS}
    tna_counters = {c.preamble.name: c.size for c in tna.counters}
    assert tna_counters == v1_counters
    # The controller reads the slot pool from the round register (placement.limits_from_p4info).
    regs = {r.preamble.name for r in tna.registers}
    assert "ingress.thc_slot.round_reg" in regs


def _net(target: str, n: int = 4, g: int = 30, **job) -> dict:
    sw = {"name": "s1", "address": "127.0.0.1:1", "addr": "10.0.0.254", "target": target}
    if target == "tofino":
        sw["p4blob"] = "/nonexistent/tofino.bin"   # only pushing the pipeline needs it
    return {
        "switches": [sw],
        "hosts": [{"name": f"h{i}", "mac": f"02:00:00:00:00:{i:02x}", "ip": f"10.0.0.{i}",
                   "attach": f"s1:{i}"} for i in range(1, n + 1)],
        "jobs": [{"name": "a", "id": 7, "members": [f"h{i}" for i in range(1, n + 1)],
                  "thc": {"b": 4, "g": g, "p": "1/32"}, **job}],
    }


@pytest.mark.parametrize("target", ("bmv2", *TNA))
def test_desired_entries_encode_against_each_p4info(target):
    if target == "bmv2":
        info = read_p4info(V1_P4INFO)
        cfg = parse_config(_net("bmv2"))
    else:
        raw = tna_p4info(target)
        info = program_view(raw)
        cfg = parse_config(_net("tofino"))
        raw_ids = {t.preamble.id for t in raw.tables}
    schema = fy.P4Schema(info)
    ents = desired_state(cfg, info)["s1"]
    names = {e.table_id for e in ents if isinstance(e, fy.P4TableEntry)}
    assert ("ingress.thc_load.tables" in names) == (target == "bmv2")
    assert {"ingress.thc_validate.jobs", "ingress.thc_validate.senders",
            "egress.thc_members.members", "ingress.routing.routes"} <= names
    for e in ents:
        msg = e.encode(schema)          # raises on an unknown name or a value too wide
        assert msg.ByteSize() > 0
        if target != "bmv2" and isinstance(e, fy.P4TableEntry):
            assert msg.table_entry.table_id in raw_ids   # the ids the switch's P4Info has
    job = cfg.jobs[0]
    assert (job.uplink, job.lane_bits) == (("values", 8) if target != "bmv2" else ("indices", 8))


def test_tofino_jobs_need_the_values_uplink_and_8_bit_lanes():
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.uplink.*'values'"):
        parse_config(_net("tofino", uplink="indices"))
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.lane_bits.*n·g = 9·30 = 270.*g <= 28"):
        parse_config(_net("tofino", n=9))
    assert parse_config(_net("tofino", n=8)).jobs[0].lane_bits == 8
    with pytest.raises(ConfigError, match=r"switches\[0\]\.p4blob: required for target 'tofino'"):
        raw = _net("tofino")
        del raw["switches"][0]["p4blob"]
        parse_config(raw)


def test_one_config_drives_one_program():
    raw = _net("tofino")
    raw["switches"].append({"name": "s2", "address": "127.0.0.1:2", "addr": "10.0.1.254"})
    with pytest.raises(ConfigError, match="one controller pushes one P4Info"):
        parse_config(raw)


@pytest.mark.tofino
@pytest.mark.parametrize("target", TNA)
def test_tna_compiles_and_matches_the_committed_outputs(target):
    stale, why = BUILD.tna_is_stale(target)
    assert not stale, f"{why}: run `make -C p4 {target}` and commit p4/build/{target}"
    p4c = BUILD.tofino_compiler()
    with tempfile.TemporaryDirectory() as tmp:
        out = BUILD.compile_tna(p4c, target, Path(tmp))
        assert out["returncode"] == 0, out["output"][-3000:]
        fresh = (Path(tmp) / "netco.p4info.txtpb").read_text()
    # Equal as the controller reads them (tables, actions, registers, counters, ids). The
    # compiler's debug-only Snapshot extern lists PHV fields whose choice varies between
    # compiles of the same source, so the text is not compared byte for byte.
    committed = read_p4info(BUILD.tna_dir(target) / "netco.p4info.txtpb")
    assert parse_p4info_text(fresh) == committed
    fits = out["resources"]
    # Placed within the chip's stages, and assembled into a device binary by bfas.
    assert fits["binary"] and fits["binary"]["bytes"] > 0
    assert 1 <= fits["stages_used"] <= fits["stages_available"]
    assert fits["fits"]
    summary = json.loads((BUILD.tna_dir(target) / "resources.json").read_text())
    assert summary["fits"] and summary["stages_used"] <= summary["stages_available"]
