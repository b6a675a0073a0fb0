"""The controller's watch for ranks that stay dead (``control_plane.thc_slot``; issue 33).

The bookkeeping (:meth:`DeadRankWatch.observe`) on readings given by hand, then the path a user
takes on the software target: ``netco controller apply FILE --watch S --dead-after S`` beside a
partial-policy job with a dead rank (the BMv2 run is in ``test_controller_e2e_bmv2.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from control_plane.cli.main import main as netco_main
from control_plane.config import parse_config
from control_plane.controller import Controller, run_sync
from control_plane.embedded import EmbeddedNetwork
from control_plane.thc_slot import DeadRankWatch
from host.paths import REPO
from host.protocol.layout import MAX_WORKERS
from host.thc import THCCodec
from host.thc.simulate import encode_workers, table_values
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from host.transport.slots import SlotConfig


def _config(policy: str = "partial", workers: int = 4) -> dict:
    return {
        "switches": [{"name": "s1", "address": "127.0.0.1:1", "addr": "10.0.0.254",
                      "target": "softswitch", "ports": workers}],
        "hosts": [{"name": f"w{r}", "mac": f"02:00:00:00:00:{r + 1:02x}", "ip": f"10.0.0.{r + 1}",
                   "attach": f"s1:{r + 1}"} for r in range(workers)],
        "jobs": [{"name": "train", "id": 7, "members": [f"w{r}" for r in range(workers)],
                  "policy": policy}],
    }


def _watch(policy: str = "partial", dead_after: float = 1.0) -> tuple[DeadRankWatch, int]:
    ctl = Controller(parse_config(_config(policy)))
    js = ctl.placement.per_switch["s1"][0]
    return DeadRankWatch(ctl, dead_after=dead_after), js.index * MAX_WORKERS


def _expected(watch: DeadRankWatch) -> int:
    (entry,) = [e for e in watch.controller.desired["s1"]
                if getattr(e, "table_id", "") == "ingress.thc_validate.jobs"]
    return int(entry.action.args["expected"])


def test_a_rank_that_stands_still_while_the_others_contribute_is_not_waited_for():
    w, base = _watch(dead_after=1.0)
    assert _expected(w) == 4
    counts = {base + r: 0 for r in range(4)}
    assert w.observe("s1", counts, now=0.0) == []
    for t in (0.5, 1.0, 1.5):
        for r in range(3):
            counts[base + r] += 100
        changes = w.observe("s1", counts, now=t)
        if t < 1.0:
            assert changes == []
    # at 1.0 s rank 3 had stood still a whole dead_after while the others moved
    js = w.controller.placement.per_switch["s1"][0]
    assert js.absent == {3} and _expected(w) == 3
    # the sender entry and the multicast replica stay: its return must show in its counter
    senders = [e for e in w.controller.desired["s1"]
               if getattr(e, "table_id", "") == "ingress.thc_validate.senders"]
    assert len(senders) == 4
    # it contributes again: waited for again
    counts[base + 3] += 1
    (back,) = w.observe("s1", counts, now=2.0)
    assert (back.rank, back.absent, back.expected) == (3, False, 4)
    assert _expected(w) == 4


def test_the_change_names_the_rank_and_the_new_expected():
    w, base = _watch(dead_after=0.5)
    counts = {base + r: 0 for r in range(4)}
    w.observe("s1", counts, now=0.0)
    counts[base] = counts[base + 1] = counts[base + 2] = 10
    w.observe("s1", counts, now=0.2)
    (ch,) = w.observe("s1", counts, now=0.6)
    assert ch.to_json() == {"switch": "s1", "job": "train", "job_id": 7, "rank": 3,
                            "absent": True, "silent_s": 0.6, "expected": 3}
    assert "rank 3" in ch.line() and "expected 3" in ch.line()


def test_an_idle_job_loses_nobody():
    """Nobody contributes (between epochs, a job not started): no rank is dead."""
    w, base = _watch(dead_after=0.5)
    counts = {base + r: 5 for r in range(4)}
    for t in (0.0, 1.0, 2.0, 10.0):
        assert w.observe("s1", counts, now=t) == []
    assert _expected(w) == 4


def test_a_slow_rank_that_moves_within_dead_after_stays():
    w, base = _watch(dead_after=1.0)
    counts = {base + r: 0 for r in range(4)}
    w.observe("s1", counts, now=0.0)
    for i, t in enumerate((0.4, 0.8, 1.2, 1.6, 2.0, 2.4)):
        for r in range(3):
            counts[base + r] += 50
        if i % 2:
            counts[base + 3] += 1      # every 0.8 s
        assert w.observe("s1", counts, now=t) == []


def test_exact_policy_jobs_are_never_changed():
    w, base = _watch(policy="exact", dead_after=0.5)
    counts = {base + r: 0 for r in range(4)}
    w.observe("s1", counts, now=0.0)
    counts[base] = 100
    assert w.observe("s1", counts, now=5.0) == []
    assert _expected(w) == 4


def test_never_all_of_a_job():
    """Ranks die one after another: the last one contributing is always waited for."""
    w, base = _watch(dead_after=0.5)
    counts = {base + r: 0 for r in range(4)}
    w.observe("s1", counts, now=0.0)
    counts[base] = 1
    (a, b, c) = w.observe("s1", counts, now=1.0)     # 1, 2, 3 stood still while 0 moved
    assert [x.rank for x in (a, b, c)] == [1, 2, 3] and _expected(w) == 1
    assert w.observe("s1", counts, now=5.0) == []    # rank 0 alone: nobody else moved
    assert _expected(w) == 1


@pytest.mark.parametrize("argv, line", [
    (["--dead-after", "1"], "--dead-after needs --watch S"),
    (["--watch", "1", "--dead-after", "-1"], "--dead-after -1.0: give a number of seconds > 0"),
    (["--watch", "1", "--dead-after", "nan"], "--dead-after nan: give a number of seconds > 0"),
])
def test_bad_dead_after_is_one_line(tmp_path, capsys, argv, line):
    import yaml

    f = tmp_path / "net.yaml"
    f.write_text(yaml.safe_dump(_config()))
    assert netco_main(["controller", "apply", str(f), *argv]) == 2
    err = capsys.readouterr().err
    assert line in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def _installed_expected(net: EmbeddedNetwork) -> int:
    ctl = Controller(net.config)
    sw = net.config.switches[0]

    async def read() -> int:
        async with ctl.session(sw, write=False) as client:
            for e in await ctl.read_installed(client):
                # read back under the short name (finsy's alias)
                if getattr(e, "table_id", "") in ("jobs", "ingress.thc_validate.jobs"):
                    return int(e.action.args["expected"])
        raise AssertionError("no jobs entry installed")

    return run_sync(read())


def test_apply_watch_dead_after_through_the_cli():
    """``netco controller apply FILE --watch 0.2 --dead-after 0.6`` beside a partial-policy job
    whose rank 3 never starts: the controller re-installs the job with ``expected`` 3 and says
    so in one JSON round; the live ranks' sums stay exact."""
    n, packets = 4, 256
    codec = THCCodec()
    import torch

    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(packets * 256, generator=g) for _ in range(n)]
    encs = encode_workers(codec, xs)
    live = sum(table_values(codec, encs)[: n - 1])
    slots = SlotConfig(policy="partial", deadline=0.5)
    with EmbeddedNetwork(n, num_slots=64, job={"policy": "partial"}) as net:
        assert _installed_expected(net) == 4
        env = dict(os.environ, NETCO_STATE_DIR=str(net.workdir / "state"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "control_plane.cli.main", "controller", "apply",
             str(net.config_path), "--watch", "0.2", "--dead-after", "0.6", "--rounds", "15",
             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            cwd=REPO)
        aggs = []
        for r in range(n - 1):
            a = net.address(r)
            aggs.append(NetworkAggregator(UdpEndpoint(a.switch, bind=(a.ip, 0)),
                                          JobSpec(net.job_id, r, n, num_slots=64, round_base=1,
                                                  token=net.token), slots))
        try:
            got: list = []
            t0 = time.monotonic()
            out: list = [None] * len(aggs)

            def go(i: int) -> None:
                out[i] = aggs[i].sum_encoded(encs[i], codec)

            while proc.poll() is None and time.monotonic() - t0 < 60:
                ts = [threading.Thread(target=go, args=(i,)) for i in range(len(aggs))]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join(30)
                got += out
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            for a in aggs:
                a.close()
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, stderr
        rounds = [json.loads(line) for line in stdout.splitlines()]
        changes = [c for r in rounds for c in r["ranks"]]
        assert changes == [{"switch": "s1", "job": "train", "job_id": net.job_id, "rank": 3,
                            "absent": True, "silent_s": changes[0]["silent_s"],
                            "expected": 3}], changes
        assert changes[0]["silent_s"] >= 0.6
        assert _installed_expected(net) == 3
        full = 0
        for sums, count in got:
            c = count.numpy()
            assert (c <= n - 1).all()
            m = c == n - 1
            full += int(m.sum())
            assert (sums.numpy().astype("int64")[m] == live[m]).all()
        assert full > len(got) * packets * 256 // 2, (full, len(got))   # most sums have all three
