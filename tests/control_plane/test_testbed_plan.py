"""Testbed layout, target choice and CLI input checks: no root, no Mininet needed."""

from __future__ import annotations

import dataclasses

import pytest

from control_plane.cli.main import main as netco
from control_plane.config import load_config, parse_config
from control_plane.testbed import targets
from control_plane.testbed.impair import Impairment
from control_plane.testbed.plan import IFNAMSIZ, PlanError, make_plan
from control_plane.testbed.targets import TestbedError, choose_target, switch_command
from host.paths import REPO

TOPOS = sorted((REPO / "mininet").glob("*.yaml"))


def test_topology_folder_is_not_a_python_package():
    # Mininet's own package is `mininet`; an __init__.py here would shadow it
    assert not (REPO / "mininet" / "__init__.py").exists()
    assert (REPO / "mininet" / "README.md").exists()
    assert {p.name for p in TOPOS} >= {"rack.yaml", "leaf_spine.yaml", "buildings.yaml"}


@pytest.mark.parametrize("topo", TOPOS, ids=lambda p: p.stem)
def test_every_topology_file_plans(topo):
    cfg = load_config(topo)  # the controller's own loader: one file for both
    plan = make_plan(cfg, "nt123")
    names = plan.root_interfaces
    assert len(names) == len(set(names))
    assert all(len(n) <= IFNAMSIZ and n.startswith("nt123") for n in names)
    used = {(h.switch, h.port) for h in cfg.hosts} | {(ln.a, ln.a_port) for ln in cfg.links} | {
        (ln.b, ln.b_port) for ln in cfg.links}
    assert {(s.name, p) for s in plan.switches for p, _ in s.ports} == used
    for h in plan.hosts:
        sw = cfg.switch(h.switch)
        assert (h.gateway_ip, h.gateway_mac) == (sw.addr, sw.mac)
    for ln, spec in zip(plan.links, cfg.links, strict=True):
        asked = any(v is not None for v in (spec.bandwidth_mbps, spec.delay_ms, spec.loss_pct))
        assert (ln.node is not None) == asked
        if asked:
            assert ln.impairment.delay_ms == (spec.delay_ms or 0)
            assert ln.impairment.loss_pct == (spec.loss_pct or 0)
            assert ln.impairment.bandwidth_mbps == spec.bandwidth_mbps


def test_files_use_distinct_p4runtime_ports():
    ports = [s.address for t in TOPOS for s in load_config(t).switches]
    assert len(ports) == len(set(ports))  # two different testbeds can be up at once


def test_two_buildings_tree_is_two_leaves_and_one_parent():
    cfg = load_config(REPO / "mininet" / "two_buildings.yaml")
    tree = {n.switch: n.parent for n in cfg.jobs[0].tree}
    assert tree == {"wan": None, "a-leaf": "wan", "b-leaf": "wan"}
    assert [ln.label for ln in make_plan(cfg, "ab").impaired] == ["b-leaf:3-wan:2"]


def _cfg(**over):
    raw = {"switches": [{"name": "averyveryverylongswitchname", "address": "127.0.0.1:50999",
                         "addr": "10.9.0.254"}],
           "hosts": [{"name": "h1", "mac": "02:00:00:00:09:01", "ip": "10.9.0.1",
                      "attach": "averyveryverylongswitchname:1"}]}
    raw.update(over)
    return parse_config(raw)


def test_long_names_fall_back_to_short_interface_names():
    plan = make_plan(_cfg(), "nt1")
    assert plan.root_interfaces == ("nt1s0-1",)


def test_remote_switch_address_is_refused_naming_the_field():
    cfg = _cfg()
    cfg = dataclasses.replace(cfg, switches=(dataclasses.replace(cfg.switches[0], address="10.1.1.1:9559"),))
    with pytest.raises(PlanError, match=r"switches\[0\].address: 10.1.1.1:9559 is not on this machine"):
        make_plan(cfg, "nt1")


def test_impairment_overrides():
    cfg = load_config(REPO / "mininet" / "leaf_spine.yaml")
    plan = make_plan(cfg, "nt1", impairments={"lf1:3-sp1:1": Impairment(dup_pct=2)})
    assert [ln.label for ln in plan.impaired] == ["lf1:3-sp1:1"]
    with pytest.raises(PlanError, match="no link lf9:1-sp1:1"):
        make_plan(cfg, "nt1", impairments={"lf9:1-sp1:1": Impairment(dup_pct=2)})
    with pytest.raises(PlanError, match="tag"):
        make_plan(cfg, "Bad_Tag")


def test_target_choice(monkeypatch, tmp_path):
    built = tmp_path / "netco.json"
    monkeypatch.setattr(targets.shutil, "which", lambda name: None)
    c = choose_target("auto", built)
    assert c.target == "softswitch" and "not on PATH" in c.reason
    with pytest.raises(TestbedError, match="simple_switch_grpc is not on PATH"):
        choose_target("bmv2", built)
    monkeypatch.setattr(targets.shutil, "which", lambda name: f"/usr/local/bin/{name}")
    assert "not built" in choose_target("auto", built).reason
    with pytest.raises(TestbedError, match="netco p4 build"):
        choose_target("bmv2", built)
    built.write_text("{}")
    assert choose_target("auto", built).target == "bmv2"
    assert choose_target("softswitch", built).target == "softswitch"
    with pytest.raises(TestbedError, match="use one of"):
        choose_target("tofino", built)


def test_switch_commands():
    plan = make_plan(load_config(REPO / "mininet" / "rack.yaml"), "nt1")
    sw = plan.switches[0]
    soft = switch_command("softswitch", sw, python="/nonexistent/python")
    assert soft[:3] == ["/nonexistent/python", "-m", "control_plane.cli.main"]
    assert soft[3:] == ["switch", "--grpc", "127.0.0.1:50101", "--device-id", "1",
                        "--port", "1=afpacket:nt1-tor-1", "--port", "2=afpacket:nt1-tor-2",
                        "--port", "3=afpacket:nt1-tor-3", "--port", "4=afpacket:nt1-tor-4"]
    bm = switch_command("bmv2", sw, thrift_port=9999)
    assert bm[bm.index("--"):] == ["--", "--grpc-server-addr", "127.0.0.1:50101"]
    assert "1@nt1-tor-1" in bm and "--no-p4" in bm and "9999" in bm


def test_cli_input_errors(tmp_path, capsys):
    assert netco(["testbed", "status", "--topo", str(tmp_path / "x.yaml"), "--state",
                  str(tmp_path / "none.json")]) == 1
    assert "not up" in capsys.readouterr().out
    assert netco(["testbed", "down", "--topo", "x.yaml", "--state", str(tmp_path / "none.json")]) == 2
    assert "nothing is up" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("switches: []\nhosts: []\n")
    assert netco(["testbed", "up", "--topo", str(bad), "--state", str(tmp_path / "s.json")]) == 2
    assert "switches: empty" in capsys.readouterr().err
    good = REPO / "mininet" / "rack.yaml"
    assert netco(["testbed", "up", "--topo", str(good), "--tag", "Bad_Tag", "--state",
                  str(tmp_path / "s.json")]) == 2
    assert "tag 'Bad_Tag'" in capsys.readouterr().err
    remote = tmp_path / "remote.yaml"
    remote.write_text(good.read_text().replace("127.0.0.1:50101", "192.0.2.1:9559"))
    assert netco(["testbed", "up", "--topo", str(remote), "--state", str(tmp_path / "s.json")]) == 2
    assert "switches[0].address: 192.0.2.1:9559 is not on this machine" in capsys.readouterr().err
