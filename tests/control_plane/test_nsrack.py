"""The namespace rack: shaped links verified, exact THC sums through its switch, rootless.

Needs ``unshare`` and either root or unprivileged user namespaces; tests skip with the reason
otherwise. As root, the end-to-end test runs as uid 65534 (``setpriv``), so the rootless path
(user namespace, named namespaces under a private /run/netns) is what is exercised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from control_plane.testbed import isolate, nsrack
from control_plane.testbed.isolate import IsolationError, check_available, run_isolated
from control_plane.testbed.shaping import (
    RATE_HIGH,
    TCP_EFFICIENCY,
    ShapingError,
    check_rates,
    rate_problems,
    tbf_args,
)
from tests.support.rootless import needs_namespaces, python_for

REPO = Path(__file__).resolve().parents[2]


needs_ns = needs_namespaces


# -- pure parts ---------------------------------------------------------------------------
def test_tbf_bucket_holds_a_gso_frame_and_4ms():
    args = tbf_args(100)
    assert args[:3] == ["tbf", "rate", "100mbit"]
    assert int(args[args.index("burst") + 1]) == 64 * 1024           # 4 ms of 100 Mbit/s < 64 KiB
    assert int(tbf_args(10_000)[4]) == int(10_000e6 / 8 * 0.004)      # 4 ms at 10 Gbit/s


def test_rate_bounds_catch_a_missing_shaper_and_a_dead_link():
    cap = 100.0
    ok = {"h1": {"up": cap * TCP_EFFICIENCY, "down": 0.9 * cap}}
    assert rate_problems(ok, cap) == []
    check_rates(ok, cap)
    fast = {"h1": {"up": 940.0, "down": 95.0}, "h2": {"up": 3.0, "down": 95.0}}
    assert rate_problems(fast, cap) == [("h1", "up"), ("h2", "up")]
    with pytest.raises(ShapingError, match=r"h1 up 940.0 Mbit/s.*h2 up 3.0"):
        check_rates(fast, cap)


def test_unavailable_namespaces_give_one_line(monkeypatch):
    monkeypatch.setattr(isolate.shutil, "which", lambda name: None)
    with pytest.raises(IsolationError, match="no 'unshare' on PATH"):
        check_available()
    monkeypatch.setattr(isolate, "unshare_command", lambda: [
        "sh", "-c", "echo 'unshare: unshare failed: Operation not permitted' >&2; exit 1", "x"])
    with pytest.raises(IsolationError) as ei:
        check_available()
    assert "Operation not permitted" in str(ei.value) and "\n" not in str(ei.value)


def test_a_job_where_namespaces_cannot_be_made_fails_in_one_line(monkeypatch, capfd):
    """run_isolated says why (as check_available does), and unshare's own complaint does not
    reach the terminal as a second line (netco train --testbed rack printed both)."""
    monkeypatch.setenv(isolate.ENV_MARK, "0")
    monkeypatch.setattr(isolate, "unshare_command", lambda: [
        "sh", "-c", "echo 'unshare: unshare failed: No space left on device' >&2; exit 1", "x"])
    with pytest.raises(IsolationError) as ei:
        run_isolated("os:getpid")
    assert "No space left on device" in str(ei.value) and "\n" not in str(ei.value)
    assert capfd.readouterr().err == ""


def test_rack_refuses_to_configure_the_callers_namespace(monkeypatch):
    monkeypatch.delenv(isolate.ENV_MARK, raising=False)
    with pytest.raises(RuntimeError, match="run_isolated"):
        nsrack.NamespaceRack(2, 100)


# -- on a real rack -----------------------------------------------------------------------
@needs_ns
def test_the_job_is_init_of_its_own_pid_namespace():
    """Whatever the job starts dies with it: the kernel kills a PID namespace with its init."""
    assert run_isolated("os:getpid") == 1



@needs_ns
def test_the_job_finds_tc_and_sysctl_without_sbin_on_the_callers_path(monkeypatch):
    """An ordinary user's PATH (Debian: /usr/local/bin:/usr/bin:/bin) lacks /usr/sbin, where
    tc and sysctl live; inside its namespace the job is root and finds root's tools."""
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    for tool in ("tc", "sysctl", "ip"):
        assert run_isolated("shutil:which", {"cmd": tool}) is not None, tool


@needs_ns
def test_lines_keep_their_order_in_a_log(tmp_path):
    """stdout and stderr into one file (a log, a pipe): what the caller printed before the
    job comes before what the job prints (``netco demo`` on the rack printed its header last)."""
    code = ("from control_plane.testbed.isolate import run_isolated\n"
            "print('before')\n"
            "run_isolated('subprocess:run', {'args': ['sh', '-c', 'echo job >&2']})\n"
            "print('after')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout buffered
    log = tmp_path / "log"
    with log.open("wb") as f:
        subprocess.run([sys.executable, "-c", code], stdout=f, stderr=subprocess.STDOUT,
                       check=True, timeout=120, cwd=REPO, env=env)
    assert log.read_text().split() == ["before", "job", "after"]


@needs_ns
def test_shaping_is_verified_and_an_unshaped_link_fails_the_check():
    rep = run_isolated("control_plane.testbed.nsrack:rack_probe",
                       {"workers": 2, "link_mbps": 100.0})
    assert rep["kind"] == "namespace rack" and rep["rootless"] == (os.geteuid() != 0)
    assert set(rep["measured_mbps"]) == {"h1", "h2"}
    check_rates(rep["measured_mbps"], 100.0)
    for ns in ("h1", "h2"):   # the shapers carried the probes, both directions
        for d in ("up", "down"):
            assert rep["tbf"][ns][d]["bytes"] > 100e6 / 8 * 0.5
    # the same links without a shaper carry far more: the check would catch a missing one
    raw = run_isolated("control_plane.testbed.nsrack:rack_probe",
                       {"workers": 1, "link_mbps": None, "expect_mbps": 100.0})
    assert raw["measured_mbps"]["h1"]["up"] > RATE_HIGH * 100 * TCP_EFFICIENCY
    assert rate_problems(raw["measured_mbps"], 100.0)


@needs_ns
@pytest.mark.slow
def test_thc_sums_through_a_shaped_rack_are_exact_rootless():
    """4 workers in their host namespaces, links shaped to 100 Mbit/s, THC through the
    software target: every rank's result equals the THC simulation bit for bit; the run is
    unprivileged (uid 65534 in a user namespace) whenever that can be arranged here."""
    from control_plane.testbed.worker import tensor
    from host.thc.codec import THCCodec
    from host.thc.simulate import allreduce as simulate

    size, seed = 50_000, 3
    with tempfile.TemporaryDirectory(prefix="netco-nsrack-test-") as tmp:
        os.chmod(tmp, 0o777)  # the unprivileged run writes its results here
        rep, outs = _exact_run(Path(tmp), size, seed)
    assert rep["rack"]["rootless"] is True
    assert rep["min_count"] == 4
    check_rates(rep["rack"]["measured_mbps"], 100.0)
    ref = simulate(THCCodec(), [tensor(seed, r, 0, size) for r in range(4)], round=0).average
    for r in range(4):
        np.testing.assert_array_equal(outs[r], ref.numpy(), err_msg=f"rank {r}")
    # THC's bytes crossed the shaped links: every host's shapers carried its datagrams
    for h in ("h1", "h2", "h3", "h4"):
        assert rep["tbf"][h]["up"]["bytes"] >= rep["thc_bytes_sent"]
        assert rep["tbf"][h]["down"]["bytes"] >= rep["thc_bytes_received"]


def _exact_run(tmp_path: Path, size: int, seed: int) -> tuple[dict, np.ndarray]:
    code = ("import json, sys, numpy as np\n"
            "from control_plane.testbed.rackrun import run_on_rack\n"
            f"r = run_on_rack('allreduce_bench', workers=4, link_mbps=100.0, elements={size}, "
            f"repeats=1, seed={seed}, check=True, quiet=True)\n"
            f"np.save('{tmp_path}/res.npy', np.stack(r.pop('results')))\n"
            f"open('{tmp_path}/rep.json', 'w').write(json.dumps(r, default=str))\n")
    if os.geteuid() == 0:
        how = python_for(65534)
        if how is None:
            pytest.skip("no Python interpreter with this venv's packages runs as uid 65534")
        cmd, env = how
        subprocess.run([*cmd, "-c", code], env=env, check=True, cwd="/tmp", timeout=600)
    else:
        subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
    return json.loads((tmp_path / "rep.json").read_text()), np.load(tmp_path / "res.npy")


def test_rack_description_is_a_table_of_rates_not_a_dict():
    """Issue 36: the demo printed the measured rates as a raw Python dict."""
    from control_plane.testbed.rackrun import describe

    text = describe({"kind": "namespace rack", "rootless": True, "workers": 2, "link_mbps": 100.0,
                     "measured_mbps": {"h2": {"up": 96.04, "down": 95.2},
                                       "h1": {"up": 95.31, "down": 94.8}}})
    lines = text.splitlines()
    assert lines[0] == ("namespace rack up (rootless): 2 hosts, links shaped to 100 Mbit/s; "
                        "measured rates (up: host to switch):")
    assert lines[1].split() == ["link", "up", "(Mbit/s)", "down", "(Mbit/s)"]
    assert [ln.split() for ln in lines[2:]] == [["h1", "95.3", "94.8"], ["h2", "96.0", "95.2"]]
    assert "{" not in text and "'" not in text
