"""The per-source rate limit of frames that fail validation (issue 33, item 4): one socket
flooding wrong-token datagrams could confirm token guesses one at a time (a status request
with the right token is answered, one with a wrong token is not) and kept the Python path busy
with its junk, with nothing in the log. The software target as a process of its own (its C
loop, where the limit lives), installed by the controller, scraped as a user scrapes it."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.request

import pytest

from control_plane.config import parse_config
from control_plane.controller import DROP_COUNTER, Controller
from host.protocol import codec as wire
from host.protocol import layout as lay
from host.softswitch.controls.native import LOOP_STATS
from host.softswitch.launch import UdpSwitch, free_tcp_port, free_udp_port
from host.transport.ports import UdpEndpoint

IP = "127.0.0.21"

pytestmark = pytest.mark.skipif(not LOOP_STATS,
                                reason="the C switch loop is not built (a C compiler: "
                                       "apt-get install build-essential, then ./dev.sh)")


def _peek(token: int) -> bytes:
    return wire.norm_status_request(1, 0, token)


def _answered(ep: UdpEndpoint, token: int, wait: float = 0.5) -> bool:
    ep.recv_many(0.0)
    ep.send_many([_peek(token)])
    end = time.monotonic() + wait
    while time.monotonic() < end:
        if any(wire.unpack_header(d).flags & lay.Flag.PEEK for d in ep.recv_many(0.05)):
            return True
    return False


def _installed(sw: UdpSwitch, **job) -> Controller:
    """Install job 1 of h1 (``IP``) and h2 on ``sw`` with the controller (``job``: more of
    its fields)."""
    cfg = parse_config({
        "switches": [{"name": "s1", "address": sw.address, "addr": "10.0.0.254",
                      "target": "softswitch"}],
        "hosts": [{"name": "h1", "ip": IP, "attach": "s1:1"},
                  {"name": "h2", "ip": "127.0.0.22", "attach": "s1:2"}],
        "jobs": [{"name": "a", "id": 1, "members": ["h1", "h2"], **job}]})
    ctl = Controller(cfg)
    assert all(r.ok for r in asyncio.run(ctl.apply()))
    return ctl


def _drops(ctl: Controller) -> dict[int, int]:
    (res,) = asyncio.run(ctl.status())
    return res.counters[DROP_COUNTER]


def test_the_frames_after_the_trip_in_the_same_batch_are_held(tmp_path):
    """The hold starts with the frame after the one that put the source over the limit, also
    inside the receive batch where that happened (before: from the next batch, so a burst of
    up to ``--batch`` frames went past it, a right guess among them answered). The switch is
    stopped while 1,010 wrong guesses and then the right one queue up, so that it reads them
    in large batches: exactly 1,001 are validated (``BAD_SENDER``) and the rest held (with
    the hold from the next batch on, 1,008 were validated here)."""
    sw = UdpSwitch(tmp_path, 2).start()
    eps: list[UdpEndpoint] = []
    try:
        ctl = _installed(sw)
        token = ctl.tokens[1]
        dst = ("127.0.0.1", sw.ports[1])
        guesser = UdpEndpoint(dst, bind=(IP, 0))
        eps.append(guesser)
        os.kill(sw.proc.pid, signal.SIGSTOP)
        try:
            wrong = lay.RATE_LIMIT_FRAMES + 10
            for k in range(0, wrong, 50):
                guesser.send_many([_peek(token ^ (0x5A5A + i)) for i in range(k, min(wrong, k + 50))])
            guesser.send_many([_peek(token)])
        finally:
            os.kill(sw.proc.pid, signal.SIGCONT)
        end = time.monotonic() + 1.0
        answered = False
        while time.monotonic() < end and not answered:
            answered = any(wire.unpack_header(d).flags & lay.Flag.PEEK for d in guesser.recv_many(0.05))
        assert not answered
        drops = _drops(ctl)
        assert drops[lay.DropReason.BAD_SENDER] == lay.RATE_LIMIT_FRAMES + 1
        assert drops[lay.DropReason.RATE_LIMITED] == 10          # 9 wrong guesses, the right one
    finally:
        for e in eps:
            e.close()
        sw.stop()


def test_the_token_from_a_port_the_binding_does_not_name_counts_toward_the_limit(tmp_path):
    """A job with a ``worker_port``: a socket on a member's address with the job's token but
    another UDP port (a neighbour that read the token) fails validation (``BAD_SENDER``), so
    its flood is rate-limited like wrong tokens. Before, the C loop's pre-filter knew only
    tokens: such frames were never counted, and each batch they hit went to the Python path."""
    sw = UdpSwitch(tmp_path, 2).start()
    eps: list[UdpEndpoint] = []
    try:
        ctl = _installed(sw, worker_port=free_udp_port())
        token = ctl.tokens[1]
        neighbour = UdpEndpoint(("127.0.0.1", sw.ports[1]), bind=(IP, 0))
        eps.append(neighbour)
        for _ in range(30):                          # 1,200 with the right token
            neighbour.send_many([_peek(token)] * 40)
        time.sleep(0.3)
        drops = _drops(ctl)
        assert drops[lay.DropReason.BAD_SENDER] == lay.RATE_LIMIT_FRAMES + 1
        assert drops[lay.DropReason.RATE_LIMITED] >= 1
        log = (tmp_path / "switch.log").read_text()
        assert f"rate limit: {IP}:{neighbour.address[1]} sent more than 1000 frames" in log
    finally:
        for e in eps:
            e.close()
        sw.stop()


def test_a_socket_flooding_wrong_tokens_is_held_and_reported(tmp_path):
    metrics = free_tcp_port()
    sw = UdpSwitch(tmp_path, 2, extra=["--metrics-port", str(metrics)]).start()
    eps: list[UdpEndpoint] = []
    try:
        cfg = parse_config({
            "switches": [{"name": "s1", "address": sw.address, "addr": "10.0.0.254",
                          "target": "softswitch"}],
            "hosts": [{"name": "h1", "ip": IP, "attach": "s1:1"},
                      {"name": "h2", "ip": "127.0.0.22", "attach": "s1:2"}],
            "jobs": [{"name": "a", "id": 1, "members": ["h1", "h2"]}]})
        ctl = Controller(cfg)
        assert all(r.ok for r in asyncio.run(ctl.apply()))
        token = ctl.tokens[1]
        wrong = token ^ 0x5A5A
        dst = ("127.0.0.1", sw.ports[1])
        guesser = UdpEndpoint(dst, bind=(IP, 0))
        other = UdpEndpoint(dst, bind=(IP, 0))       # the same address, another socket
        eps += [guesser, other]
        assert _answered(guesser, token)             # a right guess is answered (as before)
        for _ in range(40):                          # 1,600 wrong guesses, as fast as it goes
            guesser.send_many([_peek(wrong)] * 40)
        time.sleep(0.2)
        # held: its next right guess goes unanswered (before the fix: answered, confirming it)
        assert not _answered(guesser, token)
        assert _answered(other, token)               # another socket is not held
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read()
        lines = dict(ln.rsplit(" ", 1) for ln in text.decode().splitlines()
                     if ln.startswith("netco_switch_rate_limit"))
        assert float(lines['netco_switch_rate_limit_trips_total{switch="s1"}']) >= 1
        assert float(lines['netco_switch_rate_limited_total{switch="s1"}']) >= 1
        time.sleep(0.3)
        log = (tmp_path / "switch.log").read_text()
        assert f"rate limit: {IP}:{guesser.address[1]} sent more than 1000 frames" in log
        time.sleep(2.0)                              # the hold ends
        assert _answered(guesser, token, wait=1.0)
    finally:
        for e in eps:
            e.close()
        sw.stop()
