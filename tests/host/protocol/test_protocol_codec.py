"""Codec and layout of the THC wire protocol (docs/protocol.md)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host.protocol import codec
from host.protocol import layout as lay


def test_header_is_32_whole_bytes_and_offsets_match_the_spec():
    assert lay.THC_HEADER_BYTES == 32 and lay.THC_VERSION == 2
    h = codec.Header(msg_type=lay.MsgType.RESULT, job_id=0x0102, slot=0x0304, round=0x05060708,
                     rank=9, lane_bits=16, elem_count=0x0A0B, chunk_offset=0x0C0D0E0F,
                     bitmap=0x10111213, count=0x14, flags=lay.Flag.RESENT, token=0x15161718)
    b = codec.pack_header(h)
    assert len(b) == 32
    # documented offsets (docs/protocol.md, "THC header")
    assert b[0] == 2 and b[1] == 2 and b[2] == 2 and b[3] == 16
    assert b[4:6] == bytes([1, 2]) and b[6] == 9 and b[7] == 0  # round 0x...08 is even
    assert b[8:10] == bytes([3, 4]) and b[10:12] == bytes([0x0A, 0x0B])
    assert struct.unpack("!I", b[12:16])[0] == 0x05060708
    assert struct.unpack("!I", b[16:20])[0] == 0x0C0D0E0F
    assert struct.unpack("!I", b[20:24])[0] == 0x10111213
    assert b[24] == 0x14 and b[25:28] == b"\0\0\0"
    assert struct.unpack("!I", b[28:32])[0] == 0x15161718
    assert codec.unpack_header(b) == h


def test_slot_set_defaults_to_round_parity():
    assert codec.Header(msg_type=1, job_id=1, slot=0, round=7).slot_set == 1
    assert codec.Header(msg_type=1, job_id=1, slot=0, round=8).slot_set == 0


def test_indices_even_element_in_high_nibble():
    b = codec.pack_indices(np.array([0xA, 0x3, 0xF]), count=4)
    assert b == bytes([0xA3, 0xF0])
    assert list(codec.unpack_indices(b, 4)) == [0xA, 0x3, 0xF, 0]


def test_indices_out_of_range_rejected():
    with pytest.raises(ValueError, match=r"0\.\.15"):
        codec.pack_indices(np.array([16]))


@pytest.mark.parametrize("bits", [8, 16, 32])
def test_lanes_network_order_and_overflow_rejected(bits):
    top = (1 << bits) - 1
    b = codec.pack_lanes(np.array([1, top]), bits, count=2)
    assert b == (1).to_bytes(bits // 8, "big") + top.to_bytes(bits // 8, "big")
    assert list(codec.unpack_lanes(b, bits, 2)) == [1, top]
    with pytest.raises(ValueError, match="lanes"):
        codec.pack_lanes(np.array([top + 1]), bits)


def test_norms_order_as_unsigned_bits():
    vals = np.array([0.0, 1e-30, 0.5, 1.0, 3.5e3, 1e30], dtype=np.float32)
    raw = codec.pack_norms(vals, count=len(vals))
    ints = np.frombuffer(raw, dtype=">u4")
    assert np.all(np.diff(ints.astype(np.int64)) > 0)  # max of bits == max of floats
    assert np.array_equal(codec.unpack_norms(raw, len(vals)), vals)
    with pytest.raises(ValueError, match="non-negative"):
        codec.pack_norms(np.array([-1.0]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 15), min_size=0, max_size=lay.COORDS_PER_PACKET),
       st.integers(0, 2**32 - 1), st.integers(0, 31))
def test_data_message_roundtrip(idx, rnd, rank):
    h = codec.Header(msg_type=lay.MsgType.DATA, job_id=7, slot=3, round=rnd, rank=rank)
    buf = codec.encode(h, np.array(idx, dtype=np.uint8))
    assert len(buf) == codec.message_bytes(lay.MsgType.DATA, 4) == 32 + 128
    m = codec.decode(buf)
    assert m.header.round == rnd and m.header.rank == rank and m.header.elem_count == len(idx)
    assert list(m.values) == idx


@pytest.mark.parametrize("bits", [8, 16, 32])
def test_result_message_roundtrip(bits):
    vals = np.arange(lay.COORDS_PER_PACKET) % (1 << bits)
    h = codec.Header(msg_type=lay.MsgType.RESULT, job_id=1, slot=0, round=0, lane_bits=bits,
                     count=3, bitmap=0b111)
    m = codec.decode(codec.encode(h, vals))
    assert m.msg_type is lay.MsgType.RESULT and np.array_equal(m.values, vals)
    assert m.header.count == 3 and m.header.bitmap == 7


def test_undefined_type_lane_combination_rejected():
    with pytest.raises(ValueError, match="not a defined combination"):
        codec.encode(codec.Header(msg_type=lay.MsgType.DATA, job_id=1, slot=0, round=0,
                                  lane_bits=16), np.zeros(4))   # DATA: 4 (indices) or 8 (values)
    with pytest.raises(ValueError, match="payload"):
        codec.decode(codec.encode(codec.Header(msg_type=1, job_id=1, slot=0, round=0),
                                  np.zeros(4, dtype=np.uint8))[:-1])


@pytest.mark.parametrize(("n", "g", "bits"), [(8, 30, 8), (9, 30, 16), (32, 30, 16),
                                               (1, 255, 8), (2, 255, 16), (2, 40000, 32)])
def test_lane_bits_for(n, g, bits):
    assert lay.lane_bits_for(n, g) == bits


def test_lane_bits_for_rejects_overflow():
    with pytest.raises(ValueError, match="32-bit"):
        lay.lane_bits_for(2, 2**32)


def test_frames_fit_mtu():
    for m in lay.MsgType:
        for lb in (4, 8, 16, 32):
            if lay.payload_for(m, lb) is not None:
                assert 20 + 8 + codec.message_bytes(m, lb) <= 1500
