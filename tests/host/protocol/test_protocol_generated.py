"""The scapy layers and the P4 headers are generated from host.protocol.layout, not copied."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from host.paths import REPO
from host.protocol import codec
from host.protocol import layout as lay
from host.protocol import scapy_layers as sl


def test_scapy_header_fields_follow_layout():
    assert [f.name for f in sl.THC.fields_desc] == [f.name for f in lay.THC_HEADER]
    assert len(bytes(sl.THC())) == lay.THC_HEADER_BYTES
    assert sl.THC().version == lay.THC_VERSION


def test_scapy_dissects_codec_bytes_bound_to_udp_port():
    h = codec.Header(msg_type=lay.MsgType.RESULT, job_id=4, slot=2, round=5, lane_bits=16,
                     count=2, bitmap=0b11)
    vals = np.arange(lay.COORDS_PER_PACKET) * 3
    frame = Ether() / IP() / UDP(sport=1234, dport=lay.THC_UDP_PORT) / codec.encode(h, vals)
    pkt = Ether(bytes(frame))
    assert pkt[sl.THC].job_id == 4 and pkt[sl.THC].slot_set == 1
    assert pkt.haslayer(sl.ThcLanes16)
    assert pkt[sl.ThcLanes16].values() == list(vals)


def test_scapy_build_matches_codec():
    idx = np.arange(lay.COORDS_PER_PACKET) % 16
    h = codec.Header(msg_type=lay.MsgType.DATA, job_id=1, slot=0, round=0, rank=3,
                     elem_count=lay.COORDS_PER_PACKET)
    packed = codec.pack_indices(idx)
    layer = sl.THC(msg_type=1, job_id=1, rank=3, lane_bits=4, elem_count=lay.COORDS_PER_PACKET)
    layer = layer / sl.ThcIndices(**{f"p{i}": b for i, b in enumerate(packed)})
    assert bytes(layer) == codec.pack_header(h) + packed


def test_p4_header_generated_from_layout():
    text = (REPO / "p4/shared/generated_protocol.p4").read_text()
    body = re.search(r"header thc_h \{(.*?)\}", text, re.S).group(1)
    fields = re.findall(r"bit<(\d+)> (\w+);", body)
    assert [(int(b), n) for b, n in fields] == [(f.bits, f.name) for f in lay.THC_HEADER]
    assert f"THC_UDP_PORT = 0x{lay.THC_UDP_PORT:04x}" in text
    for r in lay.DropReason:
        assert f"DROP_{r.name} = {r.value};" in text


def test_committed_generated_p4_is_fresh():
    proc = subprocess.run([sys.executable, str(REPO / "p4/gen.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"run `make -C p4 gen`: {proc.stdout}{proc.stderr}"
