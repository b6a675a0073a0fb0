"""Desired-state file validation: good files load, bad ones name the field and the fix."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from control_plane.config import ConfigError, load_config, parse_config

BASE = {
    "switches": [
        {"name": "root", "address": "127.0.0.1:50051", "addr": "10.0.255.1"},
        {"name": "leaf0", "address": "127.0.0.1:50052", "addr": "10.0.255.2", "ports": 4},
        {"name": "leaf1", "address": "127.0.0.1:50053", "addr": "10.0.255.3"},
    ],
    "hosts": [
        {"name": "a0", "mac": "02:00:00:00:01:01", "ip": "10.0.1.1", "attach": "leaf0:1"},
        {"name": "a1", "mac": "02:00:00:00:01:02", "ip": "10.0.1.2", "attach": "leaf0:2"},
        {"name": "b0", "mac": "02:00:00:00:02:01", "ip": "10.0.2.1", "attach": "leaf1:1"},
        {"name": "b1", "mac": "02:00:00:00:02:02", "ip": "10.0.2.2", "attach": "leaf1:2"},
    ],
    "links": [{"a": "leaf0:3", "b": "root:1", "bandwidth_mbps": 1000, "delay_ms": 0.5},
              {"a": "leaf1:3", "b": "root:2", "loss_pct": 0.1}],
    "jobs": [{"name": "j7", "id": 7, "members": ["a0", "a1", "b0", "b1"],
              "thc": {"b": 4, "g": 30, "p": "1/32"}, "policy": "exact"}],
}

YAML = """\
switches:
  - {name: root, address: "127.0.0.1:50051", addr: 10.0.255.1}
  - {name: leaf0, address: "127.0.0.1:50052", addr: 10.0.255.2, ports: 4}
  - {name: leaf1, address: "127.0.0.1:50053", addr: 10.0.255.3}
hosts:
  - {name: a0, mac: "02:00:00:00:01:01", ip: 10.0.1.1, attach: "leaf0:1"}
  - {name: a1, mac: "02:00:00:00:01:02", ip: 10.0.1.2, attach: "leaf0:2"}
  - {name: b0, mac: "02:00:00:00:02:01", ip: 10.0.2.1, attach: "leaf1:1"}
  - {name: b1, mac: "02:00:00:00:02:02", ip: 10.0.2.2, attach: "leaf1:2"}
links:
  - {a: "leaf0:3", b: "root:1", bandwidth_mbps: 1000, delay_ms: 0.5}
  - {a: "leaf1:3", b: "root:2", loss_pct: 0.1}
jobs:
  - name: j7
    id: 7
    members: [a0, a1, b0, b1]
    thc: {b: 4, g: 30, p: 1/32}
    policy: exact
"""

TOML = """\
[[switches]]
name = "root"
address = "127.0.0.1:50051"
addr = "10.0.255.1"
[[switches]]
name = "leaf0"
address = "127.0.0.1:50052"
addr = "10.0.255.2"
ports = 4
[[switches]]
name = "leaf1"
address = "127.0.0.1:50053"
addr = "10.0.255.3"

[[hosts]]
name = "a0"
mac = "02:00:00:00:01:01"
ip = "10.0.1.1"
attach = "leaf0:1"
[[hosts]]
name = "a1"
mac = "02:00:00:00:01:02"
ip = "10.0.1.2"
attach = "leaf0:2"
[[hosts]]
name = "b0"
mac = "02:00:00:00:02:01"
ip = "10.0.2.1"
attach = "leaf1:1"
[[hosts]]
name = "b1"
mac = "02:00:00:00:02:02"
ip = "10.0.2.2"
attach = "leaf1:2"

[[links]]
a = "leaf0:3"
b = "root:1"
bandwidth_mbps = 1000
delay_ms = 0.5
[[links]]
a = "leaf1:3"
b = "root:2"
loss_pct = 0.1

[[jobs]]
name = "j7"
id = 7
members = ["a0", "a1", "b0", "b1"]
policy = "exact"
thc = { b = 4, g = 30, p = "1/32" }
"""


def bad(mutate) -> list[str]:
    raw = copy.deepcopy(BASE)
    mutate(raw)
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return info.value.problems


def test_yaml_and_toml_give_the_same_config(tmp_path: Path) -> None:
    (tmp_path / "net.yaml").write_text(YAML)
    (tmp_path / "net.toml").write_text(TOML)
    a, b = load_config(tmp_path / "net.yaml"), load_config(tmp_path / "net.toml")
    assert a == b == parse_config(BASE)
    assert a.switch("leaf0").ports == (1, 2, 3, 4)
    assert a.links[0].bandwidth_mbps == 1000.0 and a.links[1].loss_pct == 0.1
    job = a.jobs[0]
    assert job.thc.p == pytest.approx(1 / 32)
    assert job.lane_bits == 8  # n*g = 4*30 = 120 <= 255
    # derived tree: root aggregates the two leaves, each leaf its two workers
    tree = {n.switch: (n.parent, n.members) for n in job.tree}
    assert tree == {"root": (None, ()), "leaf0": ("root", ("a0", "a1")),
                    "leaf1": ("root", ("b0", "b1"))}
    assert not job.tree_explicit


def test_unknown_member_names_the_field_and_the_hosts() -> None:
    problems = bad(lambda r: r["jobs"][0]["members"].__setitem__(2, "h9"))
    assert problems == ["jobs[0].members[2]: unknown host 'h9'; hosts are a0, a1, b0, b1"]


def test_all_problems_are_reported_at_once() -> None:
    def m(r):
        r["hosts"][0]["mac"] = "02:00:00:00:01"
        r["hosts"][1]["ip"] = "10.0.1.300"
        r["switches"][2]["target"] = "tofino9"

    problems = bad(m)
    assert any(p.startswith("hosts[0].mac: '02:00:00:00:01' is not a MAC address") for p in problems)
    assert any(p.startswith("hosts[1].ip: '10.0.1.300' is not an IPv4 address") for p in problems)
    assert any(p.startswith("switches[2].target: 'tofino9' unknown; use one of bmv2") for p in problems)


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda r: r.__setitem__("swtiches", []), "(top level).swtiches: unknown field"),
    (lambda r: r["switches"].append(dict(r["switches"][0])), "switches[3].name: duplicate switch name"),
    (lambda r: r["switches"][1].__setitem__("address", "localhost"),
     "switches[1].address: 'localhost' must be HOST:PORT"),
    (lambda r: r["hosts"][0].__setitem__("attach", "leaf0:9"),
     "hosts[0].attach: switch leaf0 has no port 9; its ports are 1, 2, 3, 4"),
    (lambda r: r["hosts"][0].__setitem__("attach", "spine:1"),
     "hosts[0].attach: unknown switch 'spine'; switches are root, leaf0, leaf1"),
    (lambda r: r["hosts"][1].__setitem__("attach", "leaf0:1"),
     "hosts[1].attach: port leaf0:1 is already used by host a0"),
    (lambda r: r["hosts"][1].__setitem__("ip", "10.0.1.1"),
     "hosts[1].ip: 10.0.1.1 is also host a0's address"),
    (lambda r: r["links"][0].__setitem__("delay_ms", -1),
     "links[0].delay_ms: -1 out of range; use 0..100000 ms"),
    (lambda r: r["links"].append({"a": "root:7", "b": "leaf0:4"}),
     "links[2]: second link between root and leaf0"),
    (lambda r: r["jobs"][0]["thc"].__setitem__("b", 2),
     "jobs[0].thc.b: 2: the switch's DATA payload carries 4-bit indices; set b: 4"),
    (lambda r: r["jobs"][0]["thc"].__setitem__("g", 300), "jobs[0].thc.g: 300 out of range; use 15..255"),
    (lambda r: r["jobs"][0]["thc"].__setitem__("p", 2),
     "jobs[0].thc.p: 2: the clipped tail mass must lie in (0, 1)"),
    (lambda r: r["jobs"][0].__setitem__("policy", "fast"),
     "jobs[0].policy: 'fast' unknown; use one of exact, partial"),
    (lambda r: r["jobs"][0].__setitem__("lane_bits", 8) or r["jobs"][0]["thc"].__setitem__("g", 100),
     "jobs[0].lane_bits: 8 bits cannot hold n·g = 4·100 = 400; use 16 or more"),
    (lambda r: r["jobs"][0].__setitem__("members", ["a0", "a1", "a0"]),
     "jobs[0].members[2]: host a0 is listed twice"),
    (lambda r: r["jobs"].append(dict(r["jobs"][0], name="j8")), "jobs[1].id: 7 is also job j7's id"),
    (lambda r: r["jobs"][0].__setitem__("root", "nowhere"),
     "jobs[0].root: unknown switch 'nowhere'; switches are root, leaf0, leaf1"),
    (lambda r: r["jobs"][0].__setitem__("worker_port", 0),
     "jobs[0].worker_port: 0 out of range; use 1..65535 (the UDP port every member sends from)"),
    (lambda r: r["jobs"][0].__setitem__("worker_port", "21576"),
     "jobs[0].worker_port: must be an integer in 1..65535, got '21576'"),
    (lambda r: r["jobs"][0].__setitem__("worker_port", True),
     "jobs[0].worker_port: must be an integer in 1..65535, got True"),
    (lambda r: r["jobs"][0].__setitem__("worker_port", 7000)
     or r["jobs"].append({"name": "j8", "id": 8, "members": ["b1", "a0"], "worker_port": 7000}),
     "jobs[1].worker_port: 7000 is also job j7's worker_port, and both jobs have host b1; give "
     "each job on a shared host its own port"),
])
def test_bad_field_is_named(mutate, expected: str) -> None:
    problems = bad(mutate)
    assert any(p.startswith(expected) for p in problems), problems


def test_worker_port_reaches_the_sender_entries_of_members_only() -> None:
    """issue 33: a job's worker_port is the UDP port its members' sender bindings name; two
    jobs sharing hosts may bind distinct ports; child switches stay bound by port and address
    (udp_port 0: any)."""
    from control_plane.desired import desired_state
    from control_plane.thc_validate import SENDER

    raw = copy.deepcopy(BASE)
    raw["jobs"][0]["worker_port"] = 7000
    raw["jobs"].append({"name": "j8", "id": 8, "members": ["b1", "a0"], "worker_port": 7001})
    raw["jobs"].append({"name": "j9", "id": 9, "members": ["a1"]})
    cfg = parse_config(raw)
    assert [j.worker_port for j in cfg.jobs] == [7000, 7001, None]
    bound = {}
    for sw, ents in desired_state(cfg).items():
        for e in ents:
            if getattr(e, "action", None) is not None and e.action.name == SENDER:
                m = e.match
                bound[(sw, m["job_id"], m["rank"])] = (e.action.args["is_switch"],
                                                       e.action.args["udp_port"])
    assert bound[("leaf0", 7, 0)] == (0, 7000) and bound[("leaf1", 7, 3)] == (0, 7000)
    assert bound[("root", 7, 0)] == (1, 0)           # child switch leaf0: any port
    assert bound[("leaf0", 8, 1)] == (0, 7001) and bound[("leaf0", 9, 0)] == (0, 0)


def _tree(r, nodes):
    r["jobs"][0]["tree"] = nodes


@pytest.mark.parametrize(("nodes", "expected"), [
    ([{"switch": "leaf0"}, {"switch": "leaf1", "parent": "leaf0"}],
     "jobs[0].tree[1].parent: leaf0 is not linked to leaf1; a parent must be a direct neighbour"),
    ([{"switch": "root"}, {"switch": "leaf0", "parent": "root"}],
     "jobs[0].tree: members b0, b1 attach to switches not in the tree (leaf1)"),
    ([{"switch": "root", "parent": "leaf0"}, {"switch": "leaf0", "parent": "root"},
      {"switch": "leaf1", "parent": "root"}],
     "jobs[0].tree: needs exactly one root"),
    ([{"switch": "root"}, {"switch": "leaf0", "parent": "root", "members": ["a0", "b0"]},
      {"switch": "leaf1", "parent": "root"}],
     "jobs[0].tree[1].members[1]: b0 attaches to leaf1, not leaf0"),
    ([{"switch": "root"}, {"switch": "leaf0", "parent": "root", "members": ["a0"]},
      {"switch": "leaf1", "parent": "root"}],
     "jobs[0].tree[1].members: a1 also attach to leaf0; list them here too"),
    ([{"switch": "root"}, {"switch": "leaf0", "parent": "root"}, {"switch": "leaf1", "parent": "spine"}],
     "jobs[0].tree[2].parent: unknown switch 'spine'"),
])
def test_bad_tree_is_named(nodes, expected: str) -> None:
    problems = bad(lambda r: _tree(r, nodes))
    assert any(p.startswith(expected) for p in problems), problems


def test_explicit_tree_is_kept() -> None:
    raw = copy.deepcopy(BASE)
    raw["jobs"][0]["tree"] = [{"switch": "root"},
                              {"switch": "leaf0", "parent": "root", "members": ["a1", "a0"]},
                              {"switch": "leaf1", "parent": "root"}]
    job = parse_config(raw).jobs[0]
    assert job.tree_explicit
    assert {n.switch: n.members for n in job.tree} == {"root": (), "leaf0": ("a0", "a1"),
                                                        "leaf1": ("b0", "b1")}


@pytest.mark.parametrize(("path", "expected"), [
    ({"dst": "b0", "via": ["leaf0", "leaf1"]}, "paths[0].via: leaf0 and leaf1 are not linked"),
    ({"dst": "b0", "via": ["root", "leaf0"]}, "paths[0].via: must end at leaf1, where b0 attaches"),
    ({"dst": "b0", "src": "a0", "via": ["root", "leaf1"]},
     "paths[0].via: must start at leaf0, where a0 attaches"),
    ({"dst": "zz", "via": ["leaf1"]}, "paths[0].dst: unknown host 'zz'"),
])
def test_bad_path_is_named(path, expected: str) -> None:
    problems = bad(lambda r: r.__setitem__("paths", [path]))
    assert any(p.startswith(expected) for p in problems), problems


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"name it \.yaml, \.yml or \.toml"):
        load_config(tmp_path / "x.json")
    (tmp_path / "broken.yaml").write_text("switches: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "broken.yaml")
    (tmp_path / "empty.toml").write_text("")
    with pytest.raises(ConfigError, match=r"\(top level\).switches: missing \(required\)"):
        load_config(tmp_path / "empty.toml")


def test_members_on_unconnected_switches_are_refused() -> None:
    problems = bad(lambda r: r.__setitem__("links", []))
    assert problems == ["jobs[0].members: members attach to switches leaf0, leaf1, which no chain "
                        "of links connects; add links or split the job"]


def test_32_bit_lanes_refused_on_bmv2_only():
    from control_plane.config import ConfigError, parse_config

    def cfg(target: str) -> dict:
        return {
            "switches": [{"name": "s1", "address": "127.0.0.1:9559", "addr": "10.0.0.254",
                          "target": target}],
            "hosts": [{"name": f"h{i}", "mac": f"02:00:00:00:00:0{i}", "ip": f"10.0.0.{i}",
                       "attach": f"s1:{i}"} for i in (1, 2)],
            "jobs": [{"name": "j", "id": 1, "members": ["h1", "h2"], "lane_bits": 32}],
        }

    with pytest.raises(ConfigError, match=r"jobs\[0\]\.lane_bits: 32-bit lanes are not supported on BMv2"):
        parse_config(cfg("bmv2"))
    assert parse_config(cfg("softswitch")).jobs[0].lane_bits == 32


def _load_error(p: Path, text: str) -> ConfigError:
    """The error loading ``text`` from file ``p`` raises; it is one line."""
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert len(exc.value.lines()) == 1
    return exc.value


def test_yaml_syntax_error_is_one_line_naming_file_line_and_column(tmp_path: Path) -> None:
    p = tmp_path / "broken.yaml"
    err = _load_error(p, 'switches:\n  - {name: s1, address: "127.0.0.1:1", addr: 10.0.0.254\nhosts: []\n')
    assert err.lines()[0] == (f"{p}: line 3, column 6: not valid YAML: expected ',' or '}}', but got ':' "
                    "(while parsing a flow mapping started at line 2, column 5)")
    assert "unicode string" not in str(err) and "^" not in str(err)


def test_toml_syntax_error_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "broken.toml"
    line = _load_error(p, "a = [\nb = 1\n").lines()[0]
    assert line.startswith(f"{p}: not valid TOML: ") and "line 2" in line


def test_an_invalid_host_is_not_also_an_unknown_member() -> None:
    """The host's own problem is reported; the job naming it gets no false 'unknown host'."""
    def breaks(raw: dict) -> None:
        raw["hosts"][0]["mac"] = "02:00:00:00:00:0z"

    problems = bad(breaks)
    assert len(problems) == 1 and problems[0].startswith("hosts[0].mac:"), problems
    problems = bad(lambda r: r["switches"][1].__setitem__("addr", "10.0.255"))
    assert len(problems) == 1 and problems[0].startswith("switches[1].addr:"), problems
    # A name defined nowhere is still unknown.
    problems = bad(lambda r: r["jobs"][0]["members"].append("h99"))
    assert any("unknown host 'h99'" in p for p in problems), problems
@pytest.mark.parametrize("text, key, line, first", [
    (YAML.replace("    policy: exact\n", "    policy: exact\n    id: 8\n"), "id", 19, 15),
    (YAML.replace("ports: 4}", "ports: 4, ports: 8}"), "ports", 3, 3),
    (YAML + "hosts: []\n", "hosts", 19, 5),
], ids=["job-field", "flow-mapping", "top-level"])
def test_duplicate_yaml_keys_are_refused_naming_key_and_lines(tmp_path: Path, text, key, line,
                                                             first) -> None:
    """U2 (issue 16): PyYAML kept the last of two equal keys silently."""
    (tmp_path / "dup.yaml").write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path / "dup.yaml")
    msg = str(exc.value)
    assert f"duplicate key {key!r} on line {line} (first on line {first})" in msg
    assert "\n" not in msg


# -- switch udp addresses, packet width, optional host MACs --------------------------------------

def soft(udp=None, coords=None, target: str = "softswitch", ports=None) -> dict:
    """One software switch s1 with hosts h1, h2 on ports 1, 2 and a job over both."""
    sw = {"name": "s1", "address": "127.0.0.1:9559", "addr": "10.0.0.254", "target": target}
    if udp is not None:
        sw["udp"] = udp
    if coords is not None:
        sw["coords_per_packet"] = coords
    if ports is not None:
        sw["ports"] = ports
    return {"switches": [sw],
            "hosts": [{"name": "h1", "ip": "127.0.0.11", "attach": "s1:1"},
                      {"name": "h2", "ip": "127.0.0.12", "attach": "s1:2"}],
            "jobs": [{"name": "j", "id": 1, "members": ["h1", "h2"]}]}


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return info.value.problems


def test_udp_addresses_yaml_and_toml(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        'switches:\n  - {name: s1, address: "127.0.0.1:9559", addr: 10.0.0.254, target: softswitch,\n'
        '     udp: {1: "127.0.0.1:47001", 2: "127.0.0.1:47002"}, coords_per_packet: 1024}\n'
        "hosts:\n  - {name: h1, ip: 127.0.0.11, attach: \"s1:1\"}\n")
    (tmp_path / "a.toml").write_text(
        '[[switches]]\nname = "s1"\naddress = "127.0.0.1:9559"\naddr = "10.0.0.254"\n'
        'target = "softswitch"\ncoords_per_packet = 1024\n'
        '[switches.udp]\n"1" = "127.0.0.1:47001"\n"2" = "127.0.0.1:47002"\n'
        '[[hosts]]\nname = "h1"\nip = "127.0.0.11"\nattach = "s1:1"\n')
    a, b = load_config(tmp_path / "a.yaml"), load_config(tmp_path / "a.toml")
    assert a == b
    s1 = a.switch("s1")
    assert s1.udp == ((1, ("127.0.0.1", 47001)), (2, ("127.0.0.1", 47002)))
    assert s1.udp_address(2) == ("127.0.0.1", 47002) and s1.udp_address(3) is None
    assert s1.coords_per_packet == 1024
    assert parse_config(soft()).switch("s1").udp == ()
    assert parse_config(soft()).switch("s1").coords_per_packet == 256


@pytest.mark.parametrize(("udp", "ports", "target", "expected"), [
    ({7: "127.0.0.1:47001"}, 2, "softswitch",
     "switches[0].udp.7: switch s1 has no port 7; its ports are 1, 2 (add it to switches[].ports)"),
    ({1: "127.0.0.1"}, None, "softswitch",
     "switches[0].udp.1: '127.0.0.1' must be HOST:PORT of the UDP port (netco switch --port "
     "1=udp:HOST:PORT): an IPv4 address and a port 1..65535, e.g. 127.0.0.1:47001"),
    ({1: "localhost:47001"}, None, "softswitch", "switches[0].udp.1: 'localhost:47001' must be HOST:PORT"),
    ({1: "127.0.0.1:0"}, None, "softswitch", "switches[0].udp.1: '127.0.0.1:0' must be HOST:PORT"),
    ({1: "127.0.0.1:70000"}, None, "softswitch", "switches[0].udp.1: '127.0.0.1:70000' must be"),
    ({1: 47001}, None, "softswitch", "switches[0].udp.1: 47001 must be HOST:PORT"),
    ({"x": "127.0.0.1:47001"}, None, "softswitch", "switches[0].udp.x: 'x' is not a port number"),
    ({600: "127.0.0.1:47001"}, None, "softswitch", "switches[0].udp.600: port 600 out of range"),
    ({1: "127.0.0.1:47001", 2: "127.0.0.1:47001"}, None, "softswitch",
     "switches[0].udp.2: 127.0.0.1:47001 is also port 1's address"),
    (["127.0.0.1:47001"], None, "softswitch", "switches[0].udp: must be a mapping of switch port"),
    ({1: "127.0.0.1:47001"}, None, "bmv2",
     "switches[0].udp: only the software target (target: softswitch) has UDP ports"),
])
def test_bad_udp_is_named(udp, ports, target: str, expected: str) -> None:
    problems = problems_of(soft(udp=udp, target=target, ports=ports))
    assert any(p.startswith(expected) for p in problems), problems


def test_udp_addresses_are_unique_across_switches_and_not_on_links() -> None:
    raw = soft(udp={1: "127.0.0.1:47001"}, ports=3)
    raw["switches"].append({"name": "s2", "address": "127.0.0.1:9560", "addr": "10.0.0.253",
                            "target": "softswitch", "udp": {1: "127.0.0.1:47001"}})
    raw["links"] = [{"a": "s1:1", "b": "s2:2"}]
    problems = problems_of(raw)
    assert "switches[1].udp.1: 127.0.0.1:47001 is also switch s1 port 1's address; each UDP port " \
           "binds its own" in problems
    assert any(p.startswith("links[0].a: port s1:1 is a UDP port for a host (switches[0].udp.1)")
               for p in problems), problems


@pytest.mark.parametrize(("coords", "target", "expected"), [
    (300, "softswitch", "switches[0].coords_per_packet: 300: use one of 256, 512, 1024"),
    ("512", "softswitch", "switches[0].coords_per_packet: '512': use one of"),
    (256.0, "softswitch", "switches[0].coords_per_packet: 256.0: use one of"),
    (512, "bmv2", "switches[0].coords_per_packet: 512: the P4 programs take 256 coordinates per "
                  "packet only (this switch is bmv2); use 256, or target: softswitch"),
    (1024, "tofino", "switches[0].coords_per_packet: 1024: the P4 programs take 256"),
])
def test_bad_coords_per_packet_is_named(coords, target: str, expected: str) -> None:
    raw = soft(coords=coords, target=target)
    if target == "tofino":
        raw["switches"][0]["p4blob"] = "x.bin"
    problems = problems_of(raw)
    assert any(p.startswith(expected) for p in problems), problems


def test_coords_per_packet_of_a_job() -> None:
    assert parse_config(soft(coords=256, target="bmv2")).switch("s1").coords_per_packet == 256
    # 16-bit lanes (n·g = 2·200 = 400) fill 1024 coordinates with 2 KiB: too much for a payload
    raw = soft(coords=1024)
    raw["jobs"][0]["thc"] = {"g": 200}
    (p,) = problems_of(raw)
    assert p.startswith("jobs[0].lane_bits: 16-bit lanes on switches with coords_per_packet 1024: "
                        "1024 coordinates of 16-bit lanes need 2048 B"), p
    raw["switches"][0]["coords_per_packet"] = 512
    assert parse_config(raw).jobs[0].lane_bits == 16
    # a job across switches of different widths
    raw = soft(coords=512, ports=3)
    raw["switches"].append({"name": "s2", "address": "127.0.0.1:9560", "addr": "10.0.0.253",
                            "target": "softswitch"})
    raw["hosts"][1]["attach"] = "s2:1"
    raw["links"] = [{"a": "s1:3", "b": "s2:2"}]
    (p,) = problems_of(raw)
    assert p.startswith("jobs[0]: its switches take different coords_per_packet (s1 512, s2 256)") \
        or p.startswith("jobs[0]: its switches take different coords_per_packet (s2 256, s1 512)"), p


def test_host_mac_is_optional_and_distinct() -> None:
    raw = soft()
    raw["hosts"].append({"name": "h3", "mac": "02:00:00:00:00:09", "ip": "127.0.0.13",
                         "attach": "s1:3"})
    cfg = parse_config(raw)
    assert [h.mac for h in cfg.hosts] == ["02:4e:48:00:00:01", "02:4e:48:00:00:02",
                                          "02:00:00:00:00:09"]
    assert cfg.switch("s1").mac == "02:4e:43:00:00:01"
    many = soft()
    many["hosts"] = [{"name": f"h{i}", "ip": f"10.1.{i >> 8}.{i & 0xFF}", "attach": f"s1:{i}"}
                     for i in range(1, 301)]
    many["jobs"] = []
    macs = [h.mac for h in parse_config(many).hosts]
    assert len(set(macs)) == 300 and macs[255] == "02:4e:48:00:01:00"
    raw["hosts"][0]["mac"] = "nope"
    assert problems_of(raw) == ["hosts[0].mac: 'nope' is not a MAC address; write it like "
                                "02:00:00:00:00:01"]


def test_examples_net_yaml_gives_the_readme_switch_udp_ports() -> None:
    from host.paths import REPO

    cfg = load_config(REPO / "examples" / "net.yaml")
    assert cfg.switch("s1").udp == ((1, ("127.0.0.1", 47001)), (2, ("127.0.0.1", 47002)))


@pytest.mark.parametrize(("name", "text"), [
    ("deep.yaml", "switches: " + "[" * 5000 + "]" * 5000 + "\n"),
    ("deep.toml", "switches = " + "[" * 5000 + "]" * 5000 + "\n"),
    ("deep2.yaml", "jobs:\n" + "".join("  " * i + "- a:\n" for i in range(1, 1200))),
])
def test_a_file_nested_thousands_deep_is_one_line(tmp_path: Path, name, text):
    """Issue 33 (7): 5,000 levels printed a 2,999-line RecursionError traceback."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    (line,) = exc.value.lines()
    assert "nested too deeply" in line and name in line


def _rename(section: str, index: int, key: str, typo: str):
    def mutate(r) -> None:
        entry = r[section][index]
        entry[typo] = entry.pop(key)
    return mutate


@pytest.mark.parametrize(("section", "key", "typo"), [
    ("hosts", "ip", "addr"), ("hosts", "ip", "address"), ("hosts", "name", "nmae"),
    ("hosts", "attach", "attached"), ("switches", "address", "adress"), ("switches", "addr", "ip"),
    ("switches", "name", "nmae"),
])
def test_a_misnamed_key_is_one_problem(section, key, typo) -> None:
    """Issue 36: a renamed required key was three lines (unknown field, missing, ``None`` is not
    an address), more when others referred to the entry's name; now one line naming the key
    and the fix, and the entry's value is checked under the name meant."""
    problems = bad(_rename(section, 1, key, typo))
    assert problems == [f"{section}[1]: unknown key '{typo}' (did you mean '{key}'?)"]


def test_a_misnamed_key_with_a_bad_value_names_the_value_once() -> None:
    def mutate(r) -> None:
        r["hosts"][1]["addr"] = "10.0.1.300"
        del r["hosts"][1]["ip"]
    assert bad(mutate) == ["hosts[1]: unknown key 'addr' (did you mean 'ip'?)",
                           "hosts[1].ip: '10.0.1.300' is not an IPv4 address; write it like 10.0.0.1"]


def test_a_missing_key_is_one_problem() -> None:
    """A required key left out: 'missing', not also "None is not an IPv4 address"."""
    assert bad(lambda r: r["hosts"][1].pop("ip")) == ["hosts[1].ip: missing (required)"]
    assert bad(lambda r: r["switches"][2].pop("address")) == ["switches[2].address: missing (required)"]


def test_unknown_keys_that_match_nothing_are_named_with_the_allowed_ones() -> None:
    """Two unknown keys, one missing key, nothing alike: no guess; each problem once."""
    def mutate(r) -> None:
        r["hosts"][1].pop("ip")
        r["hosts"][1].update({"colour": "red", "port": 3})
    assert bad(mutate) == [
        "hosts[1].colour: unknown field; allowed fields are attach, ip, mac, name",
        "hosts[1].port: unknown field; allowed fields are attach, ip, mac, name",
        "hosts[1].ip: missing (required)"]
