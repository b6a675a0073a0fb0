"""``benchmarks/transport.py`` end to end in a tiny configuration (no timings asserted): every
goodput row carries the kernel limit of the C echo (``kecho.c``, built here) and its fraction,
the all-reduce block its network, codec and gloo times; the C echo itself counts every
datagram with and without GSO trains. No root (the veth part is skipped)."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from host.busywait import SPIN_US
from host.transport import kecho

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler for kecho.c")


@pytest.mark.parametrize("gso", [1, 64])
@pytest.mark.parametrize("spin_us", [0, SPIN_US])
def test_kernel_echo_counts_round_trips(gso, spin_us):
    rates = kecho.udp_limit(2, 156, 284, gso=gso, count=3000, window=64, spin_us=spin_us)
    assert len(rates) == 2 and all(r > 0 for r in rates)


def test_kernel_echo_waits_as_the_data_path_does():
    """The limit's echo polls before it sleeps exactly as long as the data path's loops
    (host/busywait.py): the two are compared, so they wait the same way."""
    for f in (kecho.udp_limit, kecho.packet_limit):
        assert inspect.signature(f).parameters["spin_us"].default == SPIN_US
    with pytest.raises(RuntimeError, match="bad arguments"):
        kecho.udp_limit(2, 156, 284, gso=1, count=100, spin_us=-1)


def test_kernel_echo_rejects_bad_arguments():
    with pytest.raises(RuntimeError, match="bad arguments"):
        kecho.udp_limit(2, 156, 284, gso=64, count=100, window=0)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="placement needs two CPUs")
def test_kernel_echo_places_its_echo_thread_alone_and_its_clients_elsewhere():
    """``cpu`` >= 0: the echo thread (the switch's place) on that CPU only, every client on the
    other CPUs, as the benchmark places the switch and its workers (host/placement.py)."""
    exe = kecho.build()
    allowed = os.sched_getaffinity(0)
    cpu = max(allowed)
    p = subprocess.Popen([str(exe), "udp", "2", "156", "284", "64", "1", "100000000", "64", "0",
                          str(cpu)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        masks: list[set[int]] = []
        for _ in range(200):  # the main thread, the echo thread, two clients, all placed
            tasks = [int(t) for t in os.listdir(f"/proc/{p.pid}/task")]
            masks = [os.sched_getaffinity(t) for t in tasks if t != p.pid]
            if len(masks) == 3 and masks.count({cpu}) == 1 and masks.count(allowed - {cpu}) == 2:
                break
            time.sleep(0.05)
        assert sorted(masks, key=len) == [{cpu}, allowed - {cpu}, allowed - {cpu}]
    finally:
        p.kill()
        p.wait(timeout=10)
    assert kecho.udp_limit(2, 156, 284, gso=64, count=3000, window=64, cpu=cpu)[0] > 0
    with pytest.raises(RuntimeError, match="CPU 4096"):
        kecho.udp_limit(2, 156, 284, gso=64, count=100, cpu=4096)


def test_benchmark_rows_carry_kernel_fractions_and_allreduce_split():
    p = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "transport.py"), "--json", "--workers", "2",
         "--coords", "8192", "--limit-packets", "2000", "--slots", "16",
         "--allreduce-elements", "40000", "--repeats", "2", "--no-veth",
         "--pipeline-coords", "8192", "--send-thread", "off"],
        capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    (row,) = out["udp"]
    assert row["kernel_limit_packets_per_s"] > 0
    # each goodput run against the echo run measured next to it; the median of those
    runs = row["fraction_of_kernel_limit_runs"]
    assert len(runs) == len(row["kernel_limit_packets_per_s_runs"]) == 2
    assert runs == pytest.approx([g / k for g, k in zip(
        row["packets_per_s_runs"], row["kernel_limit_packets_per_s_runs"], strict=True)])
    assert row["fraction_of_kernel_limit"] == pytest.approx(statistics.median(runs))
    assert row["fraction_of_limit"] > 0     # the Python echo column stays
    # the switch alone on one CPU and the workers on the others (where there are two); the
    # limit of each run is the better of the C echo placed so and not placed
    two = len(os.sched_getaffinity(0)) >= 2
    assert row["placement"] == ("pinned" if two else "free")
    assert row["switch_cpu"] == (max(os.sched_getaffinity(0)) if two else None)
    assert all(k >= p for k, p in zip(row["kernel_limit_packets_per_s_runs"],
                                      row["kernel_limit_placed_packets_per_s_runs"], strict=True))
    assert row["switch_send_thread"] is False and out["allreduce"]["switch_send_thread"] is False
    ar = out["allreduce"]
    for key in ("thc_s", "network_s", "codec_s", "gloo_s"):
        assert ar[key] > 0, key
    assert ar["parts"] > 1                   # the pipelined path ran
    assert ar["nmse_first_1000"] < 0.1       # THC's error, not garbage


@pytest.mark.parametrize("flags, named", [
    (["--slots", "1024"], "--slots 1024"),
    (["--slots", "0"], "--slots 0"),
    (["--workers", "2", "0"], "--workers 0"),
    (["--coords-per-packet", "300"], "--coords-per-packet 300"),
    (["--coords-per-packet", "1024", "--workers", "16"], "--coords-per-packet 1024"),
    (["--repeats", "0"], "--repeats 0"),
    (["--coords", "-5"], "--coords -5"),
    (["--placement", "best"], "argument --placement: invalid choice"),
])
def test_bad_flags_get_one_line_naming_the_flag(flags, named):
    p = subprocess.run([sys.executable, str(REPO / "benchmarks" / "transport.py"), *flags],
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert "Traceback" not in p.stderr and f"error: {named}" in p.stderr
