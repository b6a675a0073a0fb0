"""The values uplink (docs/protocol.md): DATA carries THC table values in 8-bit lanes.

Through the real software target on loopback UDP, the sums must equal those of the indices
uplink bit for bit (the switch adds L[q] either way; THC step 9), and the host's byte mapping
must equal the codec's table lookup.
"""

from __future__ import annotations

import numpy as np
import pytest

from control_plane.embedded import EmbeddedNetwork
from host.protocol import codec as wire
from host.protocol import layout as lay
from host.thc import THCCodec
from host.transport.job import JobSpec, NetworkAggregator, uplink_values
from host.transport.ports import UdpEndpoint
from tests.support.token import TOKEN
from tests.support.transport import encode_all, new_session, packed_sums, run_workers, worker_data


def test_uplink_values_maps_nibbles_through_the_table():
    table = np.array([0, 1, 3, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30])
    packed = np.array([0x0F, 0xA3, 0x50], dtype=np.uint8)
    got = uplink_values(packed, table)
    assert got.dtype == np.uint8
    assert got.tolist() == [0, 30, 20, 6, 10, 0]   # even element = high nibble


def test_uplink_values_refuses_values_over_8_bits():
    with pytest.raises(ValueError, match="do not fit 8 bits"):
        uplink_values(np.zeros(4, dtype=np.uint8), np.arange(16) * 20)


def test_protocol_defines_data_with_8_bit_values():
    assert lay.payload_for(lay.MsgType.DATA, lay.VALUE_BITS) is lay.LANES[8]
    assert lay.payload_for(lay.MsgType.DATA, 16) is None
    h = wire.Header(token=TOKEN, msg_type=lay.MsgType.DATA, lane_bits=lay.VALUE_BITS, job_id=1, slot=0,
                    round=2, rank=0, elem_count=3)
    msg = wire.decode(wire.encode(h, np.array([1, 2, 30], dtype=np.uint8)))
    assert msg.header.lane_bits == 8 and msg.values.tolist() == [1, 2, 30]


def test_job_spec_names_the_uplinks():
    with pytest.raises(ValueError, match="uplink='bits'"):
        JobSpec(1, 0, 2, uplink="bits", token=TOKEN)


@pytest.fixture(scope="module")
def net():
    with EmbeddedNetwork(4, num_slots=16) as n:
        yield n


@pytest.mark.parametrize("numel", [1, 1000, 70_001])
def test_values_uplink_sums_equal_indices_uplink(net, numel):
    n = net.workers
    codec = THCCodec()
    xs = worker_data(n, numel, numel + 7)
    encs = encode_all(codec, xs)
    want = packed_sums(codec, encs)
    results = {}
    for uplink in ("indices", "values"):
        base = new_session(net)

        def go(r: int, uplink=uplink, base=base):
            a = net.address(r)
            spec = JobSpec(net.job_id, r, n, num_slots=net.num_slots, round_base=base,
                           uplink=uplink, token=net.token)
            agg = NetworkAggregator(UdpEndpoint(a.switch, bind=(a.ip, 0)), spec)
            try:
                out = agg.sum_encoded(encs[r], codec)
                return out, agg.bytes_sent
            finally:
                agg.ep.close()

        results[uplink] = run_workers(n, go)
    for got in results.values():
        for (sums, count), _ in got:
            assert count == n
            np.testing.assert_array_equal(sums.numpy().astype(np.int64), want.astype(np.int64))
    # 8 bits per coordinate instead of 4: the payload doubles, the header does not.
    sent_i = results["indices"][0][1]
    sent_v = results["values"][0][1]
    n_pk = -(-encs[0].layout.padded // lay.COORDS_PER_PACKET)
    assert sent_v - sent_i == n_pk * (lay.LANES[8].nbytes - lay.INDICES.nbytes)
