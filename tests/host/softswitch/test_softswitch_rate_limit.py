"""The per-source rate limit of frames that fail validation (issue 33, item 4): one socket
flooding wrong-token datagrams could confirm token guesses one at a time (a status request
with the right token is answered, one with a wrong token is not) and kept the Python path busy
with its junk, with nothing in the log. The software target as a process of its own (its C
loop, where the limit lives), installed by the controller, scraped as a user scrapes it."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest

from control_plane.config import parse_config
from control_plane.controller import Controller
from host.protocol import codec as wire
from host.protocol import layout as lay
from host.softswitch.controls.native import LOOP_STATS
from host.softswitch.launch import UdpSwitch, free_tcp_port
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
