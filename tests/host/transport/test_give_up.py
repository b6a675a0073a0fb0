"""A switch that stops answering is given up on in bounded time under both policies, and the
error names the switch and the last contact (issue "Attach and operate from the outside",
item 5). Before, the partial policy asked for DEADLINE releases for ever."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import torch

from host.transport import slots as slotmod
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from host.transport.slots import SlotConfig, SlotTimeoutError

NATIVE = [pytest.param(True, id="c-loop"), pytest.param(False, id="python-loop")]


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("policy", ["exact", "partial"])
def test_a_silent_switch_is_given_up_naming_it(native, policy):
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # takes packets, answers none
    sink.bind(("127.0.0.1", 0))
    port = sink.getsockname()[1]
    cfg = SlotConfig(policy=policy, give_up=0.4, deadline=0.2, peek_wait=0.1, max_rto=0.1)
    agg = NetworkAggregator(UdpEndpoint(("127.0.0.1", port), bind=("127.0.0.1", 0)),
                            JobSpec(1, 0, 2, num_slots=4, token=5), cfg)
    agg.window.native = native and slotmod.NATIVE
    out: dict = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            agg.max_floats(torch.ones(100))
        except SlotTimeoutError as exc:
            out["error"] = str(exc)
        out["seconds"] = time.monotonic() - t0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    try:
        assert not t.is_alive(), f"{policy}: never gave up on a silent switch"
        msg = out["error"]
        assert f"no result from switch 127.0.0.1:{port}" in msg
        assert "no exchange completed before" in msg
        assert "did not answer a status request" in msg
        # give_up (+ the deadline under partial) + the status request's wait + one max_rto
        bound = cfg.give_up + (cfg.deadline if policy == "partial" else 0) + cfg.peek_wait
        assert out["seconds"] < bound + 1.0, out["seconds"]
    finally:
        agg.close(finish=False)
        sink.close()
