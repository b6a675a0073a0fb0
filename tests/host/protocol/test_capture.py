"""``netco capture``'s library (host/protocol/capture.py) and a real capture: tshark records a
THC all-reduce through the software target on loopback (with lost packets, so retransmissions
and re-sent results are on the wire, and two packets the switch drops), and the generated
dissector must decode every field of every packet exactly as the bytes hold them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest
import torch

from control_plane.embedded import EmbeddedNetwork
from host.protocol import capture
from host.protocol import codec as wire
from host.protocol import layout as lay
from host.protocol.dissector import dissector_path
from host.thc import THCCodec
from host.transport.faults import FaultyEndpoint
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint
from host.transport.slots import SlotConfig
from tests.support.pdml import (
    check_against_bytes,
    decode,
    drop_name,
    read_udp_payloads,
    udp_frame,
    write_pcap,
)
from tests.support.transport import run_workers


def _cli(argv: list[str]) -> int:
    """``netco capture ARGV`` through the subcommand module's own parser."""
    import argparse

    parser = argparse.ArgumentParser(prog="netco capture")
    capture.configure(parser)
    args = parser.parse_args(argv)
    return args.func(args)


def test_live_command_decodes_thc_on_the_given_ports(tmp_path):
    cmd = capture.tshark_command(interface="lo", ports=[47001, 47002])
    assert cmd[:2] == ["tshark", "-X"] and cmd[2] == f"lua_script:{dissector_path()}"
    assert cmd[cmd.index("-i") + 1] == "lo"
    assert cmd[cmd.index("-f") + 1] == f"udp port {lay.THC_UDP_PORT} or udp port 47001 or udp port 47002"
    assert "udp.port==47001,netco_thc" in cmd and "udp.port==47002,netco_thc" in cmd
    assert cmd[cmd.index("-Y") + 1] == "netco_thc"
    line = capture.shell_line(cmd)
    assert "'udp port 21576 or udp port 47001 or udp port 47002'" in line


def test_write_saves_raw_packets_without_decoding(tmp_path):
    cmd = capture.tshark_command(interface="lo", write=tmp_path / "x.pcap", count=10, duration=5)
    assert cmd[-2:] == ["-w", str(tmp_path / "x.pcap")]
    assert "-X" not in cmd and "-Y" not in cmd
    assert cmd[cmd.index("-c") + 1] == "10" and cmd[cmd.index("-a") + 1] == "duration:5"


def test_read_with_fields_output(tmp_path):
    pcap = tmp_path / "x.pcap"
    pcap.write_bytes(b"")
    cmd = capture.tshark_command(read=pcap, output="fields")
    assert cmd[cmd.index("-r") + 1] == str(pcap)
    assert "-f" not in cmd
    fields = [cmd[i + 1] for i, c in enumerate(cmd) if c == "-e"]
    assert "netco_thc.msg_type" in fields and "netco_thc.drop" in fields


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "either an interface"),
    ({"interface": "lo", "read": "x.pcap"}, "either an interface"),
    ({"read": "missing.pcap"}, "no such capture file"),
    ({"interface": "lo", "ports": [70000]}, "port 70000"),
    ({"interface": "lo", "output": "xml"}, "output 'xml'"),
    ({"interface": "lo", "count": 0}, "count 0"),
    ({"interface": "lo", "duration": -1}, "duration -1"),
])
def test_bad_arguments_are_one_line_errors(kwargs, message):
    with pytest.raises(capture.CaptureError, match=message) as exc:
        capture.tshark_command(**kwargs)
    assert "\n" not in str(exc.value)


def test_missing_tshark_names_the_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(capture.CaptureError, match="apt-get install tshark"):
        capture.find_tshark()


def test_cli_prints_the_command(capsys):
    assert _cli(["-i", "lo", "--port", "47001", "--print-command"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("tshark -X lua_script:") and "-d udp.port==47001,netco_thc" in line
    assert _cli(["--print-command"]) == 0                   # default: live on loopback
    assert " -i lo " in capsys.readouterr().out


def test_cli_bad_input_is_one_line_and_exit_2(capsys, tmp_path):
    assert _cli(["-r", str(tmp_path / "none.pcap")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("netco capture: error: ") and err.count("\n") == 1
    assert _cli(["-r", str(tmp_path / "none.pcap"), "-w", "x.pcap"]) == 2


@pytest.mark.tshark
def test_cli_decodes_a_file_as_fields(tmp_path, capfd):
    from host.protocol import codec as wire

    data = wire.encode(wire.Header(msg_type=lay.MsgType.RESULT, job_id=5, slot=2, round=9, rank=255,
                                   lane_bits=8, bitmap=3, count=2, flags=lay.Flag.RESENT), [7, 8])
    pcap = write_pcap(tmp_path / "one.pcap", [udp_frame(data, sport=lay.THC_UDP_PORT, dport=40000)])
    assert _cli(["-r", str(pcap), "--output", "fields"]) == 0
    lines = capfd.readouterr().out.splitlines()
    head, row = lines[0].split("\t"), lines[1].split("\t")
    got = dict(zip(head, row, strict=True))
    assert got["netco_thc.msg_type"] == "2" and got["netco_thc.job_id"] == "5"
    assert got["netco_thc.flags"] == "0x02" and got["netco_thc.count"] == "2"
    assert _cli(["-r", str(pcap)]) == 0
    assert "RESULT job 5 rank 255 slot 2 set 1 round 9 elems 2 count 2 bitmap 0x00000003 [RESENT]" \
        in capfd.readouterr().out


def _aggregators(net: EmbeddedNetwork, slots: SlotConfig) -> list[NetworkAggregator]:
    out = []
    for r in range(net.workers):
        a = net.address(r)
        ep = UdpEndpoint(a.switch, bind=(a.ip, 0))
        if r == 1:  # loses datagrams both ways: retransmissions (RETX) and re-sent results (RESENT)
            ep = FaultyEndpoint(ep, loss_pct=25.0, seed=4)
        out.append(NetworkAggregator(ep, JobSpec(net.job_id, r, net.workers, num_slots=net.num_slots,
                                                 token=net.token),
                                     slots))
    return out


@pytest.mark.root
@pytest.mark.tshark
def test_capture_of_a_real_allreduce_decodes_field_by_field(tmp_path, monkeypatch):
    # one datagram per packet on lo: a capture shows a UDP GSO train as one packet
    monkeypatch.setenv("NETCO_UDP_GSO", "0")
    n, numel = 2, 5000
    codec = THCCodec()
    g = torch.Generator().manual_seed(9)
    xs = [torch.randn(numel, generator=g) for _ in range(n)]
    pcap = tmp_path / "allreduce.pcapng"
    aggs: list[NetworkAggregator] = []
    with EmbeddedNetwork(n, num_slots=8) as net:
        cmd = capture.tshark_command(interface="lo", ports=net.ports, write=pcap)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            started = ""
            while "Capturing on" not in started:  # tshark says so once the capture runs
                line = proc.stderr.readline()
                assert line, f"tshark ended before capturing: {started}"
                started += line
            aggs += _aggregators(net, SlotConfig(rto=0.02, max_rto=0.2))
            run_workers(n, lambda r: aggs[r].allreduce(xs[r], codec))
            # two packets the switch drops for what they are (named by the dissector)
            a = net.address(0)
            bad_set = wire.encode(wire.Header(msg_type=lay.MsgType.DATA, job_id=net.job_id, slot=0,
                                              round=7, slot_set=0), [1, 2, 3])
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind((a.ip, 0))
                s.sendto(bad_set, a.switch)
                s.sendto(bytes([lay.THC_VERSION + 1]) + bad_set[1:], a.switch)
            status = net.status()[0].counters["ingress.drops"]
            time.sleep(0.5)  # let the capture take the last packets from the kernel
        finally:
            os.kill(proc.pid, signal.SIGINT)
            proc.wait(30)
            for agg in aggs:
                agg.ep.close()
    retx = sum(a.window.stats.retransmits for a in aggs)
    assert retx > 0  # the loss was in effect
    assert status[lay.DropReason.MALFORMED] == 1 and status[lay.DropReason.BAD_VERSION] == 1

    payloads = read_udp_payloads(pcap)
    pkts = decode(pcap, ports=tuple(net.ports))
    assert len(pkts) == len(payloads) > 0
    seen_types: dict[str, int] = {}
    flags_seen: set[str] = set()
    drops = []
    for p in pkts:
        h = check_against_bytes(p, payloads[p.number])
        name = lay.MsgType(h.msg_type).name if h.msg_type in set(lay.MsgType) else "?"
        seen_types[name] = seen_types.get(name, 0) + 1
        flags_seen.update(fl.name for fl in lay.Flag if h.flags & fl)
        if drop_name(p):
            drops.append(drop_name(p))
    k = -(-codec.layout(numel).padded // lay.COORDS_PER_PACKET)
    assert seen_types["DATA"] >= n * k + 2 and seen_types["RESULT"] >= n * k
    assert seen_types["NORM"] >= n and seen_types["NORM_RESULT"] >= n
    assert "RETX" in flags_seen
    assert sorted(drops) == ["BAD_VERSION", "MALFORMED"]
