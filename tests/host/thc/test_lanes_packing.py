"""Packing, lane widths and integer aggregation."""

import numpy as np
import pytest
import torch

from host.thc.lanes import LaneOverflowError, aggregate_packed, check_capacity, lane_bits
from host.thc.packing import pack_indices, unpack_indices
from host.thc.table import DEFAULT_TABLE


def test_pack_even_element_in_high_nibble():
    q = torch.tensor([1, 2, 15, 0, 7], dtype=torch.uint8)
    p = pack_indices(q, 4)
    assert p.tolist() == [0x12, 0xF0, 0x70]
    assert unpack_indices(p, 4, 5).tolist() == q.tolist()


def test_pack_roundtrip_random():
    q = torch.randint(0, 16, (10001,), dtype=torch.uint8)
    assert torch.equal(unpack_indices(pack_indices(q, 4), 4, q.numel()), q)
    q8 = torch.randint(0, 64, (33,), dtype=torch.uint8)
    assert torch.equal(unpack_indices(pack_indices(q8, 6), 6, 33), q8)


@pytest.mark.parametrize(("n", "g", "bits"), [(1, 30, 8), (8, 30, 8), (9, 30, 16), (2184, 30, 16),
                                              (2185, 30, 32)])
def test_lane_width_from_n_times_g(n, g, bits):
    assert lane_bits(n, g) == bits


def test_overflow_refused():
    with pytest.raises(LaneOverflowError, match="16"):
        check_capacity(9, 30, 8)
    with pytest.raises(LaneOverflowError, match="32-bit"):
        lane_bits(1 << 30, 30)
    payload = pack_indices(torch.full((8,), 15, dtype=torch.uint8), 4)
    with pytest.raises(LaneOverflowError):
        aggregate_packed([payload] * 9, DEFAULT_TABLE, 30, 4, 8, lane=8)


@pytest.mark.parametrize("workers", [1, 2, 8, 9, 40])
def test_aggregate_sums_table_values_exactly(workers):
    rng = np.random.default_rng(workers)
    qs = [rng.integers(0, 16, 1001).astype(np.uint8) for _ in range(workers)]
    payloads = [pack_indices(torch.from_numpy(q), 4) for q in qs]
    sums = aggregate_packed(payloads, DEFAULT_TABLE, 30, 4, 1001)
    expect = np.sum([np.asarray(DEFAULT_TABLE)[q] for q in qs], axis=0)
    assert sums.dtype == {8: np.uint8, 16: np.uint16}[lane_bits(workers, 30)]
    assert np.array_equal(sums.astype(np.int64), expect)
    assert int(expect.max()) > 0
