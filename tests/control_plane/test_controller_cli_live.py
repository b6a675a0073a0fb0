"""``netco controller`` against a real software switch: the persisted tokens survive a switch
restart, ``job`` writes what workers load, ``rotate`` replaces a job's token, ``show`` masks it.

Each test starts ``python -m host.softswitch`` processes (no root) and stops them by PID; the
controller runs through the functions the ``netco`` command runs (``control_plane.cli.main``),
with the token state in this test's own ``NETCO_STATE_DIR`` (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import finsy as fy
import pytest
import yaml
from finsy.p4client import P4ClientError

from control_plane.cli.main import main as netco_main
from control_plane.config import load_config
from control_plane.controller import Controller
from control_plane.placement import JOBS_TABLE
from control_plane.tokens import TokenStore, mask_token
from host.protocol.layout import THC_UDP_PORT
from host.softswitch.launch import free_udp_port
from host.transport.jobfile import load
from tests.support.switchproc import Switch


@pytest.fixture
def switch(tmp_path: Path):
    sw = Switch(tmp_path, {1: free_udp_port(), 2: free_udp_port(), 3: free_udp_port()}, coords=512)
    sw.start()
    try:
        yield sw
    finally:
        sw.stop()


def write_config(tmp_path: Path, sw: Switch, name: str = "net.yaml") -> Path:
    """Two jobs on one switch; ports 1 and 2 have UDP addresses, port 3 does not."""
    cfg = {
        "switches": [{"name": "s1", "address": sw.address, "addr": "127.0.0.254",
                      "target": "softswitch", "ports": 3, "coords_per_packet": sw.coords,
                      "udp": {n: f"127.0.0.1:{p}" for n, p in sw.ports.items() if n != 3}}],
        "hosts": [{"name": "h1", "ip": "127.0.0.11", "attach": "s1:1"},
                  {"name": "h2", "ip": "127.0.0.12", "attach": "s1:2"},
                  {"name": "h3", "ip": "127.0.0.13", "attach": "s1:3"}],
        "jobs": [{"name": "train", "id": 3, "members": ["h2", "h1", "h3"], "num_slots": 24,
                  "thc": {"g": 60}, "policy": "partial"},
                 {"name": "eval", "id": 9, "members": ["h1", "h2"]}],
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def installed_tokens(path: Path) -> dict[int, int]:
    """job id -> the token the switch of ``path`` holds (read back over P4Runtime)."""
    cfg = load_config(path)
    ctl = Controller(cfg)

    async def read() -> dict[int, int]:
        async with ctl.session(cfg.switches[0], write=False) as client:
            try:
                entries = [e async for e in client.read(fy.P4TableEntry(JOBS_TABLE))]
            except P4ClientError as exc:
                assert exc.is_pipeline_missing, exc
                return {}                  # an empty (restarted) switch
            return ctl.installed_tokens(entries)

    return asyncio.run(read())


def apply(path: Path, capsys, *extra: str) -> dict:
    assert netco_main(["controller", "apply", str(path), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_switch_restart_then_cli_apply_reinstalls_the_same_tokens(switch: Switch, tmp_path: Path,
                                                                  capsys) -> None:
    """The operator's restart procedure: restart the switch, `netco controller apply FILE`."""
    path = write_config(tmp_path, switch)
    assert netco_main(["controller", "apply", str(path)]) == 0
    capsys.readouterr()
    first = installed_tokens(path)
    assert set(first) == {3, 9} and all(first.values())

    switch.kill()
    switch.start()                      # empty: no pipeline, no entries, no tokens
    assert installed_tokens(path) == {}
    # the config file moved and renamed: the tokens are keyed by switch address and job id
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    path = Path(path.rename(moved / "renamed.yaml"))
    out = apply(path, capsys)
    assert out["writes"] > 0            # reinstalled everything
    assert installed_tokens(path) == first
    assert {int(k): v for k, v in out["tokens"].items()} == first
    assert apply(path, capsys)["writes"] == 0
    # where they were kept: the state directory, not the config file's folder
    state = Path(os.environ["NETCO_STATE_DIR"]) / "tokens.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.parent.stat().st_mode) == 0o700
    assert json.loads(state.read_text())["switches"] == {switch.address: {"3": first[3],
                                                                          "9": first[9]}}
    assert sorted(p.name for p in moved.iterdir()) == ["renamed.yaml"]


def test_the_switch_wins_over_the_persisted_token(switch: Switch, tmp_path: Path, capsys) -> None:
    """A token a switch holds (another controller installed it) replaces the persisted one,
    which then follows the switch."""
    path = write_config(tmp_path, switch)
    apply(path, capsys)
    mine = installed_tokens(path)
    theirs = Controller(load_config(path))          # another controller, without the state
    for job in ("train", "eval"):
        theirs.rotate_token(job)
    asyncio.run(theirs.apply())
    assert installed_tokens(path) == theirs.tokens != mine
    assert TokenStore().get(3, [switch.address]) == mine[3]
    assert apply(path, capsys)["writes"] == 0
    assert installed_tokens(path) == theirs.tokens
    assert TokenStore().get(3, [switch.address]) == theirs.tokens[3]


def test_state_dir_flag_overrides_the_environment(switch: Switch, tmp_path: Path, capsys) -> None:
    path = write_config(tmp_path, switch)
    apply(path, capsys, "--state-dir", str(tmp_path / "mine"))
    tokens = installed_tokens(path)
    assert TokenStore(tmp_path / "mine").get(3, [switch.address]) == tokens[3]
    assert not (Path(os.environ["NETCO_STATE_DIR"]) / "tokens.json").exists()


def test_job_file_holds_the_installed_job(switch: Switch, tmp_path: Path, capsys) -> None:
    path = write_config(tmp_path, switch)
    out = tmp_path / "train.job"
    assert netco_main(["controller", "job", str(path), "train", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"netco controller: error: job train has no installed token yet: run "
                   f"`netco controller apply {path}` first")
    assert not out.exists()
    apply(path, capsys)
    token = installed_tokens(path)[3]

    assert netco_main(["controller", "job", str(path), "train", "--out", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["token"] == mask_token(token) and str(token) not in json.dumps(shown)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    jf = load(out)
    assert (jf.name, jf.job_id, jf.token, jf.num_slots) == ("train", 3, token, 24)
    assert (jf.b, jf.g, jf.p) == (4, 60, pytest.approx(1 / 32))
    assert (jf.lane_bits, jf.uplink, jf.policy, jf.coords_per_packet) == (8, "indices", "partial", 512)
    assert [(m.rank, m.host, m.ip, m.switch, m.switch_udp) for m in jf.members] == [
        (0, "h2", "127.0.0.12", "s1", ("127.0.0.1", switch.ports[2])),
        (1, "h1", "127.0.0.11", "s1", ("127.0.0.1", switch.ports[1])),
        # port 3 has no udp address in the file: the switch's addr and the THC port
        (2, "h3", "127.0.0.13", "s1", ("127.0.0.254", THC_UDP_PORT)),
    ]
    # the second job: its own slot range after the first's, 16 slots by default
    assert netco_main(["controller", "job", str(path), "eval", "--out", str(tmp_path / "e")]) == 0
    assert "e: job eval (id 9), 2 members (h1, h2)" in capsys.readouterr().out
    ev = load(tmp_path / "e")
    assert (ev.token, ev.num_slots, ev.world) == (installed_tokens(path)[9], 16, 2)


def test_job_subcommand_refuses_an_unknown_job(switch: Switch, tmp_path: Path, capsys) -> None:
    path = write_config(tmp_path, switch)
    assert netco_main(["controller", "job", str(path), "nope", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"netco controller: error: JOB: unknown job 'nope' in {path}; jobs are "
                           "train, eval")


def test_rotate_installs_and_persists_a_new_token(switch: Switch, tmp_path: Path, capsys) -> None:
    path = write_config(tmp_path, switch)
    apply(path, capsys)
    before = installed_tokens(path)

    assert netco_main(["controller", "rotate", str(path), "--job", "train"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    after = installed_tokens(path)
    assert after[3] != before[3] and after[9] == before[9]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"job train (id 3): new token {mask_token(after[3])} installed on s1; "
                               "reload workers h2, h1, h3: give each a fresh job file")
    assert str(after[3]) not in lines[0]
    assert TokenStore().get(3, [switch.address]) == after[3]
    # the next apply keeps the rotated token (it is installed and persisted)
    assert apply(path, capsys)["writes"] == 0 and installed_tokens(path) == after

    assert netco_main(["controller", "rotate", str(path), "--job", "train", "--job", "eval",
                       "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    final = installed_tokens(path)
    assert [(r["job"], r["installed"], r["reload"], r["token"]) for r in out["rotated"]] == [
        ("train", True, ["h2", "h1", "h3"], mask_token(final[3])),
        ("eval", True, ["h1", "h2"], mask_token(final[9]))]
    assert final[3] != after[3] and final[9] != after[9]
    assert str(final[3]) not in json.dumps(out) and str(final[9]) not in json.dumps(out)

    assert netco_main(["controller", "rotate", str(path), "--job", "nope"]) == 2
    assert "--job: unknown job 'nope'" in capsys.readouterr().err


def test_show_prints_the_token_to_be_installed_masked(switch: Switch, tmp_path: Path, capsys) -> None:
    path = write_config(tmp_path, switch)
    assert netco_main(["controller", "show", str(path)]) == 0
    text = capsys.readouterr().out
    assert "job train (id 3): token: drawn at the first apply" in text
    assert netco_main(["controller", "show", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"]["train"]["token"] == {
        "masked": None, "source": "drawn at the first apply"}

    apply(path, capsys)
    token = installed_tokens(path)
    switch.kill()                       # offline: show reads the state file only
    assert netco_main(["controller", "show", str(path)]) == 0
    text = capsys.readouterr().out
    assert f"job train (id 3): token {mask_token(token[3])} (persisted)" in text
    assert f"job eval (id 9): token {mask_token(token[9])} (persisted)" in text
    assert netco_main(["controller", "show", str(path), "--json"]) == 0
    raw = capsys.readouterr().out
    assert json.loads(raw)["jobs"]["eval"]["token"] == {"masked": mask_token(token[9]),
                                                        "source": "persisted"}
    for t in token.values():
        assert str(t) not in raw and f"{t:08x}" not in raw and f"{t:x}" not in raw
