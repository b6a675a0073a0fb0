"""``netco controller`` without a switch: show, and bad input giving exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from control_plane.cli.main import main as netco_main
from tests.support.netfile import one_switch_net

GOOD = one_switch_net("127.0.0.1:1")


@pytest.fixture
def good(tmp_path: Path) -> Path:
    p = tmp_path / "net.yaml"
    p.write_text(GOOD)
    return p


def test_show_json_lists_jobs_members_and_entries(good: Path, capsys) -> None:
    assert netco_main(["controller", "show", str(good), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    job = out["jobs"]["j"]
    assert (job["id"], job["index"], job["slot_base"], job["num_slots"], job["lane_bits"]) == (4, 0, 0, 10, 8)
    assert [(m["host"], m["rank"], m["switch_addr"], m["switch_port"]) for m in job["members"]] == [
        ("h2", 0, "10.0.0.254", 2), ("h1", 1, "10.0.0.254", 1)]
    ents = out["switches"]["s1"]
    assert len(ents) == 7 + 2  # job entries + 2 routes
    rank0 = "ingress.thc_validate.senders job_id=4 rank=0 ingress_port=2 src_addr=10.0.0.2"
    assert any(rank0 in e for e in ents)


def test_show_text(good: Path, capsys) -> None:
    assert netco_main(["controller", "show", str(good)]) == 0
    text = capsys.readouterr().out
    assert "s1 (9 entities):" in text and "multicast group 1 -> replicas 1 2" in text


def test_bad_file_exits_2_naming_the_field(tmp_path: Path, capsys) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(GOOD.replace("members: [h2, h1]", "members: [h2, h9]"))
    for action in ("show", "diff", "apply", "status"):
        assert netco_main(["controller", action, str(p)]) == 2
        err = capsys.readouterr().err
        assert "jobs[0].members[1]: unknown host 'h9'; hosts are h1, h2" in err, err


def test_unknown_switch_option_and_slot_overflow(good: Path, tmp_path: Path, capsys) -> None:
    assert netco_main(["controller", "show", str(good), "--switch", "s7"]) == 2
    assert "--switch: unknown switch 's7'; switches are s1" in capsys.readouterr().err
    p = tmp_path / "big.yaml"
    p.write_text(GOOD.replace("num_slots: 10", "num_slots: 300"))
    assert netco_main(["controller", "show", str(p)]) == 2
    assert "jobs[0].num_slots: no free range of 300 slots left" in capsys.readouterr().err


def test_watch_arguments_are_checked(good: Path, capsys) -> None:
    assert netco_main(["controller", "apply", str(good), "--watch", "-1"]) == 2
    assert "--watch and --rounds must not be negative" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["apply", "--election-id", "-5"], "--election-id -5: P4Runtime election ids are 1..2^128-1"),
    (["apply", "--election-id", str(1 << 128)], "--election-id"),
    (["apply", "--timeout", "-1"], "--timeout -1.0: give a number of seconds > 0"),
    (["status", "--timeout", "nan"], "--timeout nan"),
    (["diff", "--timeout", "0"], "--timeout 0.0"),
    (["apply", "--tls-cert", "c.pem", "--tls-key", "k.pem"], "--tls-ca"),
    (["apply", "--tls-ca", "/nonexistent/ca.pem"], "--tls-ca /nonexistent/ca.pem: no such file"),
])
def test_bad_options_exit_2_with_one_line(good: Path, capsys, argv, message) -> None:
    assert netco_main(["controller", argv[0], str(good), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_binary_file_is_one_line(tmp_path: Path, capsys) -> None:
    p = tmp_path / "net.yaml"
    p.write_bytes(bytes(range(256)) * 4)
    for action in ("show", "diff"):
        assert netco_main(["controller", action, str(p)]) == 2
        err = capsys.readouterr().err
        assert "not a text file" in err and len(err.strip().splitlines()) == 1, err


def test_finsy_gnmi_warning_is_logged_once(caplog) -> None:
    import logging

    from control_plane.controller import FINSY_ONCE

    FINSY_ONCE.seen.clear()
    log = logging.getLogger("finsy")
    with caplog.at_level(logging.WARNING, logger="finsy"):
        for sw in ("s1", "s1", "s2"):
            log.warning("[%s|Switch._run&] gNMI is not implemented", sw)
        log.warning("something else")
        log.warning("something else")
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["[s1|Switch._run&] gNMI is not implemented", "something else", "something else"]


def test_status_watch_options_are_checked(good: Path, capsys) -> None:
    for args, message in (
        (["--rounds", "2"], "--rounds and --workers go with --watch SECONDS"),
        (["--workers", "http://127.0.0.1:9200/metrics"], "--rounds and --workers go with --watch"),
        (["--watch", "-1"], "--watch and --rounds must not be negative"),
        (["--watch", "1", "--json"], "--watch draws a table"),
    ):
        assert netco_main(["controller", "status", str(good), *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("netco controller: error: ") and message in err and err.count("\n") == 1


def test_several_problems_are_one_line_each(tmp_path: Path, capsys) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(GOOD.replace('"02:00:00:00:00:01"', '"02:00:00:00:00:0z"').replace('"s1:2"', '"s1:9x"'))
    assert netco_main(["controller", "show", str(p)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"netco controller: error: {p}: hosts[0].mac: '02:00:00:00:00:0z' is not a MAC address; "
        "write it like 02:00:00:00:00:01",
        f"netco controller: error: {p}: hosts[1].attach: port '9x' must be a number, e.g. 's1:1'",
    ]


def test_show_masks_the_persisted_token_everywhere(good: Path, tmp_path: Path, capsys) -> None:
    from control_plane.tokens import TokenStore

    TokenStore(tmp_path / "state").put({"127.0.0.1:1": {4: 0x9ABCDEF1}})
    assert netco_main(["controller", "show", str(good)]) == 0        # not this state dir
    assert "job j (id 4): token: drawn at the first apply" in capsys.readouterr().out
    args = ["controller", "show", str(good), "--state-dir", str(tmp_path / "state")]
    assert netco_main(args) == 0
    text = capsys.readouterr().out
    assert "job j (id 4): token ******f1 (persisted)" in text
    assert "token=******f1)" in text                                  # the set_job entry too
    assert netco_main([*args, "--json"]) == 0
    raw = capsys.readouterr().out
    assert json.loads(raw)["jobs"]["j"]["token"] == {"masked": "******f1", "source": "persisted"}
    for form in (str(0x9ABCDEF1), "9abcdef1"):
        assert form not in raw and form not in text


def test_a_corrupt_state_file_is_one_line(good: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "tokens.json").write_text("{oops")
    for action in ("show", "diff", "apply", "status"):
        assert netco_main(["controller", action, str(good), "--state-dir",
                           str(tmp_path / "state")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"netco controller: error: token state file {tmp_path}/state/"
                              "tokens.json: not JSON") and err.count("\n") == 1, err
