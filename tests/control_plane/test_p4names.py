"""Program names over a Tofino P4Info (control_plane.p4names): one controller, both programs.

The Tofino compiler names tables, counters and registers ``pipe.ingress.…`` (its actions keep
the program's names); a P4Info of that shape is made here from the software target's P4Info,
so these checks run without the Tofino toolchain (tests/p4/test_p4_tna.py repeats the
essential ones on the compiler's own P4Info where it is committed).
"""

from __future__ import annotations

import finsy as fy
from finsy.proto import p4i

from control_plane.config import parse_config
from control_plane.controller import Controller
from control_plane.desired import desired_state
from control_plane.p4names import pipeline_prefix, program_view
from control_plane.placement import limits_from_p4info
from control_plane.reconcile import diff
from host.softswitch.p4info import netco_p4info

NET = {
    "switches": [{"name": "s1", "address": "127.0.0.1:1", "addr": "10.0.0.254"}],
    "hosts": [{"name": f"h{i}", "mac": f"02:00:00:00:00:0{i}", "ip": f"10.0.0.{i}",
               "attach": f"s1:{i}"} for i in range(1, 5)],
    "jobs": [{"name": "a", "id": 1, "members": ["h1", "h2", "h3", "h4"]}],
}


def tofino_style(info: p4i.P4Info, prefix: str = "pipe.") -> p4i.P4Info:
    """``info`` named the way the Tofino compiler names it (tables, counters, registers)."""
    out = p4i.P4Info()
    out.CopyFrom(info)
    for group in (out.tables, out.counters, out.registers):
        for ent in group:
            ent.preamble.alias = ent.preamble.name.rsplit(".", 1)[-1]
            ent.preamble.name = prefix + ent.preamble.name
    return out


def test_prefix_found_only_on_tofino_names():
    v1 = netco_p4info()
    assert pipeline_prefix(v1) == ""
    assert program_view(v1) is v1
    assert pipeline_prefix(tofino_style(v1)) == "pipe."
    assert pipeline_prefix(tofino_style(v1, "pipe_b.")) == "pipe_b."


def test_view_restores_names_and_keeps_ids():
    v1 = netco_p4info()
    raw = tofino_style(v1)
    before = raw.SerializeToString()
    view = program_view(raw)
    assert raw.SerializeToString() == before          # the P4Info to push is left alone
    for group in ("tables", "counters", "registers", "actions"):
        want = {(e.preamble.id, e.preamble.name) for e in getattr(v1, group)}
        got = {(e.preamble.id, e.preamble.name) for e in getattr(view, group)}
        assert got == want, group
    jobs = next(t for t in view.tables if t.preamble.name == "ingress.thc_validate.jobs")
    assert jobs.preamble.alias == "jobs"               # the compiler's alias, kept
    assert pipeline_prefix(view) == ""                 # a view of a view is the view
    schema = fy.P4Schema(view)
    assert schema.tables["ingress.thc_validate.jobs"].id == schema.tables["jobs"].id == jobs.preamble.id


def test_entries_encode_to_the_same_ids_and_reconcile_against_prefixed_reads():
    v1 = netco_p4info()
    raw = tofino_style(v1)
    view = program_view(raw)
    cfg = parse_config(NET)
    ents = desired_state(cfg, view)["s1"]
    assert ents == desired_state(cfg, v1)["s1"]
    s_view, s_v1, s_raw = fy.P4Schema(view), fy.P4Schema(v1), fy.P4Schema(raw)
    for e in ents:
        assert e.encode(s_view) == e.encode(s_v1)
    # What the switch returns, decoded by a client holding the compiler's P4Info, carries
    # the compiler's aliases ("jobs"); reconciling it against the desired state changes
    # nothing, and a changed entry is still found as one.
    back = []
    for e in ents:
        msg = e.encode(s_view)
        cls = fy.P4TableEntry if msg.HasField("table_entry") else fy.P4MulticastGroupEntry
        back.append(cls.decode(msg, s_raw))
    assert "jobs" in {getattr(b, "table_id", None) for b in back}
    ins, mod, dele, foreign = diff(ents, back, s_view)
    assert (ins, mod, dele, foreign) == ([], [], [], [])
    ins, mod, dele, foreign = diff(ents, back[1:], s_view)
    assert len(ins) == 1 and (mod, dele, foreign) == ([], [], [])


def test_limits_and_controller_use_program_names():
    v1 = netco_p4info()
    raw = tofino_style(v1)
    assert limits_from_p4info(raw) == limits_from_p4info(v1)
    ctl = Controller(parse_config(NET), p4info=raw)
    assert ctl.p4info is raw                          # pushed as the compiler wrote it
    assert ctl.schema.tables["ingress.thc_validate.jobs"].id == \
        fy.P4Schema(raw).tables["pipe.ingress.thc_validate.jobs"].id
    assert ctl.desired["s1"] == desired_state(parse_config(NET), v1, tokens=ctl.tokens)["s1"]


TOFINO_TEXT = '''pkg_info {
  arch: "tna"
}
tables {
  preamble {
    id: 49878364
    name: "pipe.ingress.thc_validate.jobs"
    alias: "jobs"
  }
  size: 16
}
externs {
  extern_type_id: 132
  extern_type_name: "Register"
  instances {
    preamble {
      id: 2248157633
      name: "pipe.ingress.thc_slot.round_reg"
      alias: "round_reg"
    }
    info {
      [type.googleapis.com/barefoot.Register] {
        type_spec {
          bitstring {
            bit {
              bitwidth: 32
            }
          }
        }
        size: 4096
      }
    }
  }
}
externs {
  extern_type_id: 131
  extern_type_name: "Counter"
  instances {
    preamble {
      id: 2212520208
      name: "pipe.ingress.drops"
      alias: "drops"
    }
    info {
      [type.googleapis.com/barefoot.Counter] {
        spec {
          unit: PACKETS
        }
        size: 16
      }
    }
  }
}
externs {
  extern_type_id: 144
  extern_type_name: "Snapshot"
  instances {
    preamble {
      id: 2530000000
      name: "pipe.snap"
    }
    info {
      [type.googleapis.com/barefoot.Snapshot] {
        pipe: "pipe"
      }
    }
  }
}
'''


def test_tofino_register_and_counter_externs_are_read():
    from control_plane.desired import parse_p4info_text

    info = parse_p4info_text(TOFINO_TEXT)
    assert [(t.preamble.name, t.size) for t in info.tables] == [("pipe.ingress.thc_validate.jobs", 16)]
    assert [(r.preamble.id, r.preamble.name, r.size) for r in info.registers] == \
        [(2248157633, "pipe.ingress.thc_slot.round_reg", 4096)]
    (c,) = info.counters
    assert (c.preamble.name, c.preamble.alias, c.size, c.spec.unit) == \
        ("pipe.ingress.drops", "drops", 16, p4i.CounterSpec.PACKETS)
    assert info.registers[0].type_spec.bitstring.bit.bitwidth == 32
    view = program_view(info)
    assert [r.preamble.name for r in view.registers] == ["ingress.thc_slot.round_reg"]
    assert fy.P4Schema(view).registers["ingress.thc_slot.round_reg"].id == 2248157633
    assert limits_from_p4info(info).slot_pool == 4096 // 4
