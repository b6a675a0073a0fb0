"""The switch's rate limit as an operator sees it (issue 33, 4: "a counter, a log line and a
metric when it trips"), through ``netco controller apply`` and ``netco controller status``
against the software target: a socket on a member's address guesses the job's token with
more than ``RATE_LIMIT_FRAMES`` status requests; its right guess then goes unanswered, and
``status --json`` shows the trip (``ingress.rate_limit.trips``) and the ``RATE_LIMITED`` drops;
``status --watch`` prints the line naming the switch. (BMv2 and the software target's loops:
tests/p4/test_p4_hardening.py; the table, log line and metric: test_telemetry.py.)"""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import pytest

from control_plane.cli.main import main as netco_main
from host.protocol import codec as wire
from host.protocol import layout as lay
from host.softswitch.launch import free_udp_port
from host.transport.jobfile import load
from tests.support.switchproc import Switch, job_config


@pytest.fixture
def switch(tmp_path: Path):
    sw = Switch(tmp_path, {1: free_udp_port(), 2: free_udp_port()}, extra=["--c-loop"])
    sw.start()
    try:
        yield sw
    finally:
        sw.stop()


def _answered(s: socket.socket, frame: bytes, to: tuple[str, int], wait: float = 1.0) -> bool:
    s.sendto(frame, to)
    s.settimeout(wait)
    try:
        s.recvfrom(65535)
    except TimeoutError:
        return False
    return True


def _status(path: Path, capsys) -> dict:
    assert netco_main(["controller", "status", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["switches"][0]["counters"]


def test_a_token_guesser_is_held_and_the_operator_sees_it(switch: Switch, tmp_path: Path,
                                                          capsys, caplog) -> None:
    path = job_config(tmp_path / "net.yaml", switch, members=2, job={"num_slots": 4})
    assert netco_main(["controller", "apply", str(path)]) == 0
    out = tmp_path / "demo.job"
    assert netco_main(["controller", "job", str(path), "demo", "--out", str(out)]) == 0
    capsys.readouterr()
    jf = load(out)
    m0 = jf.member(0)
    to = tuple(m0.switch_udp)
    right = wire.norm_status_request(jf.job_id, 0, jf.token)
    counters = _status(path, capsys)
    assert counters["ingress.rate_limit.trips"] == {"0": 0}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((m0.ip, 0))                           # member 0's address, a port of its own
        assert _answered(s, right, to)               # a right guess is answered ...
        for i in range(lay.RATE_LIMIT_FRAMES + 50):
            s.sendto(wire.norm_status_request(jf.job_id, 0, jf.token ^ (i + 1)), to)
        assert not _answered(s, right, to)           # ... but not once its socket is held
    counters = _status(path, capsys)
    assert counters["ingress.rate_limit.trips"] == {"0": 1}
    drops = counters["ingress.drops"]
    assert int(drops[str(int(lay.DropReason.RATE_LIMITED))]) >= 1
    assert int(drops[str(int(lay.DropReason.BAD_SENDER))]) >= lay.RATE_LIMIT_FRAMES + 1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((m0.ip, 0))                           # another socket is not held
        assert _answered(s, right, to)
    assert netco_main(["controller", "status", str(path)]) == 0      # the table shows it too
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[-3:] == ["drift", "rate-limit", "trips"]
    assert table[2].split()[0] == "s1" and table[2].split()[-1] == "1"
    with caplog.at_level(logging.WARNING, logger="control_plane.telemetry"):
        assert netco_main(["controller", "status", str(path), "--watch", "0.1", "--rounds", "1"]) == 0
    shown = capsys.readouterr().out
    assert "\ns1: the rate limit held 1 more source(s) (1 so far)" in shown, shown
    assert any("the rate limit held" in r.getMessage() for r in caplog.records)
