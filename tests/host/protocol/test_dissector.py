"""The generated Wireshark/tshark dissector (host/protocol/dissector.py -> netco_thc.lua).

The committed script must be what the generator writes from the layout; tshark (Debian's
package; the tests skip without it) must decode every header field, payload element, message
type, flag and packet-level drop reason of crafted packets exactly as the bytes hold them.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from host.paths import REPO
from host.protocol import codec
from host.protocol import dissector as gen
from host.protocol import layout as lay
from tests.support.pdml import check_against_bytes, decode, drop_name, udp_frame, write_pcap


def test_committed_script_is_fresh():
    committed = Path(gen.__file__).with_name(gen.LUA_NAME)
    assert committed.read_text() == gen.render(), "run: python -m host.protocol.dissector"
    assert gen.main(["--check"]) == 0


def test_check_reports_a_stale_script(tmp_path, capsys):
    stale = tmp_path / "x.lua"
    stale.write_text(gen.render().replace("DATA", "DATA2", 1))
    assert gen.main(["--check", "--out", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err
    gen.main(["--out", str(stale)])
    assert gen.main(["--check", "--out", str(stale)]) == 0


def test_script_ships_with_the_package():
    assert gen.dissector_path().is_file()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "*.lua" in pyproject["tool"]["setuptools"]["package-data"]["host.protocol"]


def test_script_names_every_field_type_flag_and_reason_of_the_layout():
    lua = gen.render()
    for f in lay.THC_HEADER:
        assert f'"netco_thc.{f.name}", "{f.name}"' in lua
    for m in lay.MsgType:
        assert f'[{m.value}] = "{m.name}"' in lua
    for fl in lay.Flag:
        assert f'"netco_thc.flags.{fl.name.lower()}", "{fl.name}", 8, nil, 0x{fl.value:02x}' in lua
    for d in lay.DropReason:
        assert f'[{d.value}] = "{d.name}"' in lua
    assert f"local THC_UDP_PORT = {lay.THC_UDP_PORT}" in lua


def _msg(msg_type, lane_bits, values, elem_count=None, **kw) -> bytes:
    h = codec.Header(msg_type=msg_type, lane_bits=lane_bits, **kw)
    body = codec.encode(h, np.asarray(values))[lay.THC_HEADER_BYTES:]
    if elem_count is not None:
        h.elem_count = elem_count
    return codec.pack_header(h) + body


def _raw(msg_type, lane_bits, nbytes, **kw) -> bytes:
    return codec.pack_header(codec.Header(msg_type=msg_type, lane_bits=lane_bits, **kw)) + bytes(nbytes)


def _crafted() -> list[tuple[bytes, str | None]]:
    """(UDP payload, the drop reason the dissector must name) for every message type."""
    rng = np.random.default_rng(1)
    T = lay.MsgType
    return [
        (_msg(T.DATA, 4, rng.integers(0, 16, 200), job_id=7, slot=3, round=17, rank=2,
              elem_count=200, chunk_offset=768, flags=lay.Flag.RETX), None),
        (_msg(T.DATA, 8, rng.integers(0, 31, 256), job_id=7, slot=1, round=2, rank=1,
              elem_count=256), None),
        (_msg(T.RESULT, 16, rng.integers(0, 65535, 3), job_id=7, slot=3, round=17,
              rank=lay.RANK_ALL, elem_count=3, bitmap=0b101, count=2, flags=lay.Flag.RESENT), None),
        (_msg(T.RESULT, 32, rng.integers(0, 2**32 - 1, 256), job_id=7, slot=0, round=8, rank=0,
              elem_count=256, bitmap=0xFFFFFFFF, count=32, flags=lay.Flag.PEEK), None),
        (_msg(T.NORM, 32, rng.random(5).astype(np.float32), job_id=7, slot=0, round=4, rank=1,
              elem_count=5, flags=lay.Flag.DEADLINE | lay.Flag.RETX), None),
        (_msg(T.NORM_RESULT, 32, rng.random(32).astype(np.float32), job_id=7, slot=0, round=4,
              rank=lay.RANK_ALL, elem_count=32, bitmap=3, count=2), None),
        (_msg(T.PARTIAL, 8, rng.integers(0, 255, 100), job_id=7, slot=2, round=9, rank=3,
              elem_count=100, bitmap=0b1100, count=2), None),
        (_msg(T.NORM_PARTIAL, 32, rng.random(7).astype(np.float32), job_id=7, slot=2, round=9,
              rank=3, elem_count=7, bitmap=0b1100, count=2), None),
        # what a netco switch drops for the packet alone
        (_msg(T.DATA, 4, [1, 2], job_id=7, slot=0, round=4, slot_set=1, elem_count=2), "MALFORMED"),
        (_msg(T.DATA, 4, [1, 2], job_id=7, slot=0, round=4, rank=40, elem_count=2), "MALFORMED"),
        (_msg(T.DATA, 4, [1], job_id=7, slot=0, round=4, elem_count=300), "MALFORMED"),
        (_raw(T.RESULT, 4, 128, job_id=7, slot=0, round=4, elem_count=1), "MALFORMED"),
        (_msg(T.DATA, 4, [1], job_id=7, slot=0, round=4, elem_count=1,
               version=lay.THC_VERSION + 1), "BAD_VERSION"),
        (_raw(9, 4, 128, job_id=7, slot=0, round=4), "BAD_TYPE"),
        (_msg(T.DATA, 4, [1], job_id=7, slot=0, round=4, elem_count=1)[:100], "SHORT"),
    ]


@pytest.mark.tshark
def test_tshark_decodes_every_field_of_every_message_type(tmp_path):
    crafted = _crafted()
    frames = []
    for i, (data, _) in enumerate(crafted):
        # to the THC port, from it, and to another port (decoded as THC with -d)
        sport, dport = [(40000 + i, lay.THC_UDP_PORT), (lay.THC_UDP_PORT, 40000 + i),
                        (40000 + i, 47001)][i % 3]
        frames.append(udp_frame(data, sport=sport, dport=dport))
    pcap = write_pcap(tmp_path / "crafted.pcap", frames)
    got = decode(pcap, ports=(47001,))
    assert len(got) == len(crafted)
    for pkt, (data, reason) in zip(got, crafted, strict=True):
        if len(data) >= lay.THC_HEADER_BYTES:
            h = check_against_bytes(pkt, data)
            assert bool(pkt.all("netco_thc.retx.expert")) == bool(h.flags & lay.Flag.RETX)
        assert drop_name(pkt) == reason, (pkt.number, reason)
        if reason:
            assert pkt.all("netco_thc.drop.expert")


@pytest.mark.tshark
def test_heuristic_finds_thc_on_any_port_and_leaves_other_udp_alone(tmp_path):
    data = _crafted()[0][0]
    frames = [udp_frame(data, sport=40000, dport=47002),          # THC on a random port
              udp_frame(b"hello, not THC", sport=40000, dport=47002),
              udp_frame(data[:-1], sport=40000, dport=47002)]     # wrong length: not claimed
    got = decode(write_pcap(tmp_path / "h.pcap", frames))
    assert got[0].thc_pos is not None
    check_against_bytes(got[0], data)
    assert got[1].thc_pos is None and got[2].thc_pos is None
