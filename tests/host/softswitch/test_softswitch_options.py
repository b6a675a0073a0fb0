"""``netco switch`` options: every bad one is one line naming the flag, before anything opens."""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from control_plane.cli.main import main
from host.protocol import generated_dataplane as dp
from host.softswitch.cli import configure
from host.softswitch.launch import free_tcp_port
from host.softswitch.server import MAX_WRITE_UPDATES
from host.softswitch.switch import SoftSwitch

NETCO = [sys.executable, "-c", "import sys; from control_plane.cli.main import main; sys.exit(main())"]


def _free_udp() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _netco_switch(tmp_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen, Path]]:
    """``netco switch`` on a free UDP port with ``args``, waited for (30 s at most) until it
    writes its ready file or exits: (the process, the ready file); terminated after the block."""
    ready = tmp_path / "ready"
    proc = subprocess.Popen([*NETCO, "switch", "--port", f"1=udp:127.0.0.1:{_free_udp()}", *args,
                             "--ready-file", str(ready)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(300):
            if ready.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        yield proc, ready
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_slot_pool_defaults_to_the_p4_programs():
    parser = argparse.ArgumentParser()
    configure(parser)
    assert parser.parse_args([]).slots == dp.THC_SLOTS
    assert f"default {dp.THC_SLOTS}" in parser.format_help()
    sw = SoftSwitch()
    try:
        assert sw.pipeline.pool_slots == dp.THC_SLOTS
    finally:
        sw.close()


@pytest.mark.parametrize(("argv", "message"), [
    (["--slots", "100000000"], "--slots 100000000: give 1..65536"),
    (["--slots", "0"], "--slots 0"),
    (["--batch", "0"], "--batch 0"),
    (["--spin-us", "-1"], "--spin-us -1: give 0..1000000 microseconds"),
    (["--spin-us", "5000000"], "--spin-us 5000000: give 0..1000000"),
    (["--cpu", "4096"], "--cpu 4096: give one of the CPUs this process may use"),
    (["--cpu", "-2"], "--cpu -2: give one of the CPUs this process may use"),
    (["--device-id", "-1"], "--device-id -1"),
    (["--grpc", "127.0.0.1:99999"], "--grpc '127.0.0.1:99999': port 99999 is not in 0..65535"),
    (["--grpc", "nohost"], "--grpc 'nohost': expected HOST:PORT"),
    (["--p4info", "/nonexistent/p.txtpb"], "--p4info /nonexistent/p.txtpb: no such file"),
    (["--tls-cert", "/nonexistent/c.pem"], "--tls-cert and --tls-key: give both"),
    (["--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"],
     "--tls-cert /nonexistent/c.pem: no such file"),
    (["--port", "1=udp:127.0.0.1:99999"], "UDP port 99999 is not in 0..65535"),
    (["--port", "1=udp:300.0.0.1:5000"], "'300.0.0.1' is not an IPv4 address"),
    (["--coords-per-packet", "300"], "--coords-per-packet 300: use one of 256, 512, 1024"),
    (["--absent-silence", "-1"], "--absent-silence -1.0: give a number of seconds >= 0"),
    (["--absent-silence", "nan"], "--absent-silence nan: give a number of seconds >= 0"),
    (["--slots", "65536", "--coords-per-packet", "1024"],
     "--slots 65536 with --coords-per-packet 1024: the pool would hold 1024 MiB of sums; give at "
     "most 16384 slots"),
])
def test_bad_options_are_one_line(capsys, argv, message):
    port = [] if "--port" in argv else ["--port", f"1=udp:127.0.0.1:{_free_udp()}"]
    assert main(["switch", *port, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_p4info_that_is_not_one_is_one_line(tmp_path, capsys):
    bad = tmp_path / "p.txtpb"
    bad.write_text("this is { not a p4info")
    assert main(["switch", "--port", f"1=udp:127.0.0.1:{_free_udp()}", "--p4info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "--p4info" in err and "not a P4Info" in err and len(err.strip().splitlines()) == 1


def test_serve_reports_the_port_it_listens_on():
    sw = SoftSwitch()
    try:
        addr = sw.serve("127.0.0.1:0")
        host, port = addr.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        with socket.create_connection(("127.0.0.1", int(port)), timeout=5):
            pass
    finally:
        sw.stop()


def test_second_server_on_the_same_address_is_refused():
    a = SoftSwitch()
    b = SoftSwitch()
    try:
        addr = a.serve(f"127.0.0.1:{free_tcp_port()}")
        with pytest.raises(OSError, match="in use"):
            b.serve(addr)
    finally:
        a.stop()
        b.stop()


def test_second_netco_switch_on_the_same_grpc_address_fails_with_one_line(tmp_path):
    grpc_addr = f"127.0.0.1:{free_tcp_port()}"
    with _netco_switch(tmp_path, "--grpc", grpc_addr) as (_first, ready):
        assert ready.read_text().strip() == grpc_addr
        second = subprocess.run([*NETCO, "switch", "--port",
                                 f"1=udp:127.0.0.1:{_free_udp()}", "--grpc", grpc_addr],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert f"--grpc {grpc_addr}: cannot listen" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr


def test_cpu_pins_every_thread_of_the_switch(tmp_path):
    """``--cpu N``: the running switch, every thread of it (gRPC's, the loop's), on CPU N only."""
    import os

    cpu = max(os.sched_getaffinity(0))
    with _netco_switch(tmp_path, "--grpc", f"127.0.0.1:{free_tcp_port()}",
                       "--cpu", str(cpu)) as (sw, ready):
        assert ready.exists(), sw.stderr.read().decode() if sw.poll() is not None else "no ready"
        tasks = os.listdir(f"/proc/{sw.pid}/task")
        assert len(tasks) > 1  # the gRPC server's threads at least
        assert all(os.sched_getaffinity(int(t)) == {cpu} for t in tasks)


def test_writes_report_each_update_or_are_refused_whole(tmp_path):
    """P4Runtime: per-update errors in the Write error, however many updates there are."""
    import finsy as fy

    from host.softswitch.launch import AsyncLoop
    from host.softswitch.p4info import netco_p4info, write_p4info

    sw = SoftSwitch()
    addr = sw.serve("127.0.0.1:0")
    loop = AsyncLoop()
    info = write_p4info(netco_p4info(), tmp_path / "netco.p4info.txtpb")
    c = fy.Switch("c", addr, fy.SwitchOptions(p4info=info, p4blob=b"", device_id=1,
                                              initial_election_id=10))
    try:
        loop.run(c.__aenter__(), timeout=30)
        def routes(first: int, n: int) -> list:
            return [fy.P4TableEntry("ingress.routing.routes",
                                    match=fy.P4TableMatch(dst_addr=(f"10.{i >> 8}.{i & 255}.0", 24)),
                                    action=fy.P4TableAction("ingress.routing.route", port=1,
                                                            src_mac="02:00:00:00:00:01",
                                                            dst_mac="02:00:00:00:00:02"))
                    for i in range(first, first + n)]

        # the most one Write may carry, one bad (a duplicate): its code comes back by position
        batch = routes(0, MAX_WRITE_UPDATES - 1)
        batch.append(batch[7])
        with pytest.raises(fy.P4ClientError) as e:
            loop.run(c.insert(batch))
        assert e.value.code == fy.GRPCStatusCode.UNKNOWN
        bad = {i: d.canonical_code for i, d in e.value.details.items()
               if d.canonical_code != fy.GRPCStatusCode.OK}
        assert bad == {MAX_WRITE_UPDATES - 1: fy.GRPCStatusCode.ALREADY_EXISTS}
        # all of them bad: every code still arrives (messages are kept for the first few)
        with pytest.raises(fy.P4ClientError) as e:
            loop.run(c.insert(routes(0, MAX_WRITE_UPDATES - 1) + routes(0, 1)))
        codes = [d.canonical_code for _, d in sorted(e.value.details.items())]
        assert codes == [fy.GRPCStatusCode.ALREADY_EXISTS] * MAX_WRITE_UPDATES
        # beyond the limit: refused whole with a message saying so, nothing applied
        with pytest.raises(fy.P4ClientError) as e:
            loop.run(c.insert(routes(1000, 2000)))
        assert e.value.code == fy.GRPCStatusCode.RESOURCE_EXHAUSTED
        assert f"at most {MAX_WRITE_UPDATES}" in e.value.message
        assert len(sw.service.store.tables[sw.service.store.index.table(
            "ingress.routing.routes").id].entries) == MAX_WRITE_UPDATES - 1
    finally:
        loop.run(c.__aexit__(None, None, None), timeout=10)
        loop.close()
        sw.stop()


@pytest.fixture(autouse=True)
def _no_leftover(tmp_path: Path):
    yield


def test_a_restarted_server_gets_its_address_back(tmp_path):
    """Connections of the previous server in TIME_WAIT must not block a restart."""
    import grpc
    from finsy.proto import p4r, p4r_grpc

    a = SoftSwitch()
    addr = a.serve(f"127.0.0.1:{free_tcp_port()}")
    with grpc.insecure_channel(addr) as ch:
        p4r_grpc.P4RuntimeStub(ch).Capabilities(p4r.CapabilitiesRequest(), timeout=5)
    a.stop()
    b = SoftSwitch()
    try:
        assert b.serve(addr) == addr
    finally:
        b.stop()


def test_metrics_port_in_use_is_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc = main(["switch", "--port", f"1=udp:127.0.0.1:{_free_udp()}", "--grpc", "127.0.0.1:0",
                   "--metrics-port", str(port)])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith(f"netco switch: error: --metrics-port: metrics: cannot listen on 127.0.0.1:{port}")
    assert len(err.strip().splitlines()) == 1, err


def test_switch_serves_its_counters_for_prometheus(tmp_path):
    import urllib.request

    ready = tmp_path / "ready"
    metrics = free_tcp_port()
    proc = subprocess.Popen([*NETCO, "switch", "--port", f"1=udp:127.0.0.1:{_free_udp()}",
                             "--grpc", "127.0.0.1:0", "--p4info", "default",
                             "--metrics-port", str(metrics), "--ready-file", str(ready)],
                            stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < end, "netco switch did not start"
            time.sleep(0.1)
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read().decode()
        assert 'netco_switch_jobs{switch="s1"} 0.0' in text
        assert "netco_switch_frames_received_total" in text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"metrics http://127.0.0.1:{metrics}/metrics" in err
