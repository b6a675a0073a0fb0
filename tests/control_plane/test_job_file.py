"""control_plane/job_file.py: a job file from the desired-state file (pure, no switch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.config import parse_config
from control_plane.job_file import build_job_file
from control_plane.placement import place
from host.protocol.layout import THC_UDP_PORT
from host.transport.jobfile import JobFile, load, write

TREE = {
    "switches": [
        {"name": "root", "address": "127.0.0.1:1", "addr": "10.0.255.1", "target": "softswitch",
         "coords_per_packet": 512},
        {"name": "leaf0", "address": "127.0.0.1:2", "addr": "10.0.255.2", "target": "softswitch",
         "coords_per_packet": 512, "udp": {1: "127.0.0.1:40001"}},
        {"name": "leaf1", "address": "127.0.0.1:3", "addr": "10.0.255.3", "target": "softswitch",
         "coords_per_packet": 512, "udp": {"1": "127.0.0.2:40001", "2": "127.0.0.2:40002"}},
    ],
    "hosts": [{"name": "a0", "ip": "10.0.1.1", "attach": "leaf0:1"},
              {"name": "a1", "ip": "10.0.1.2", "attach": "leaf0:2"},
              {"name": "b0", "ip": "10.0.2.1", "attach": "leaf1:1"},
              {"name": "b1", "ip": "10.0.2.2", "attach": "leaf1:2"}],
    "links": [{"a": "leaf0:3", "b": "root:1"}, {"a": "leaf1:3", "b": "root:2"}],
    "jobs": [{"name": "first", "id": 2, "members": ["a0", "b0"], "num_slots": 40},
             {"name": "big", "id": 5, "members": ["b1", "a1", "b0", "a0"], "thc": {"g": 100},
              "uplink": "values", "policy": "partial"}],
}


def test_members_get_their_attachment_switch_and_udp_address(tmp_path: Path) -> None:
    cfg = parse_config(TREE)
    pl = place(cfg)
    jf = build_job_file(cfg, pl, "big", 0xABCDEF)
    assert isinstance(jf, JobFile)
    assert (jf.name, jf.job_id, jf.token, jf.num_slots) == ("big", 5, 0xABCDEF, 16)
    assert pl.slots["big"] == (40, 16)                  # after the first job's 40 slots
    assert (jf.b, jf.g, jf.p, jf.lane_bits) == (4, 100, pytest.approx(1 / 32), 16)
    assert (jf.uplink, jf.policy, jf.coords_per_packet) == ("values", "partial", 512)
    assert [(m.rank, m.host, m.ip, m.switch, m.switch_udp) for m in jf.members] == [
        (0, "b1", "10.0.2.2", "leaf1", ("127.0.0.2", 40002)),
        (1, "a1", "10.0.1.2", "leaf0", ("10.0.255.2", THC_UDP_PORT)),   # leaf0 port 2: no udp
        (2, "b0", "10.0.2.1", "leaf1", ("127.0.0.2", 40001)),
        (3, "a0", "10.0.1.1", "leaf0", ("127.0.0.1", 40001)),
    ]
    # the format's own reader takes it back unchanged
    assert load(write(tmp_path / "big.job", jf)) == jf


def test_default_width_and_fields() -> None:
    raw = {**TREE, "switches": [{k: v for k, v in s.items() if k != "coords_per_packet"}
                                for s in TREE["switches"]]}
    cfg = parse_config(raw)
    jf = build_job_file(cfg, place(cfg), "first", 1)
    assert (jf.coords_per_packet, jf.num_slots, jf.lane_bits, jf.uplink, jf.policy) == (
        256, 40, 8, "indices", "exact")
    assert jf.worker_port == 0                          # the job names none: ephemeral ports


def test_worker_port_is_carried_and_an_older_file_without_it_loads(tmp_path: Path) -> None:
    raw = {**TREE, "jobs": [dict(TREE["jobs"][0], worker_port=7100), TREE["jobs"][1]]}
    cfg = parse_config(raw)
    jf = build_job_file(cfg, place(cfg), "first", 1)
    assert jf.worker_port == 7100
    assert load(write(tmp_path / "first.job", jf)) == jf
    obj = jf.to_json()
    del obj["worker_port"]                              # a file written before the field
    assert JobFile.from_json(obj).worker_port == 0
    obj["worker_port"] = 70000
    with pytest.raises(ValueError, match=r"worker_port: 70000 must be an integer in 0\.\.65535"):
        JobFile.from_json(obj)
