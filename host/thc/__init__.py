"""THC: Tensor Homomorphic Compression (Li et al., NSDI 2024, arXiv 2302.08545); docs/thc.md.

Names are imported on first use (PEP 562), so ``host.thc.table`` — tables, no torch — loads in
a tool that never encodes (the controller) without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from host.lazy import lazy_getattr

_EXPORTS = {
    "Encoded": "host.thc.codec",
    "NonFiniteError": "host.thc.codec",
    "THCCodec": "host.thc.codec",
    "THCConfig": "host.thc.config",
    "THCConfigError": "host.thc.config",
    "LaneOverflowError": "host.thc.lanes",
    "aggregate_packed": "host.thc.lanes",
    "check_capacity": "host.thc.lanes",
    "lane_bits": "host.thc.lanes",
    "DEFAULT_TABLE": "host.thc.table",
    "optimal_table": "host.thc.table",
    "predicted_nmse": "host.thc.table",
}

__all__ = [
    "DEFAULT_TABLE",
    "Encoded",
    "LaneOverflowError",
    "NonFiniteError",
    "THCCodec",
    "THCConfig",
    "THCConfigError",
    "aggregate_packed",
    "check_capacity",
    "lane_bits",
    "optimal_table",
    "predicted_nmse",
]

if TYPE_CHECKING:  # pragma: no cover
    from host.thc.codec import Encoded, NonFiniteError, THCCodec
    from host.thc.config import THCConfig, THCConfigError
    from host.thc.lanes import LaneOverflowError, aggregate_packed, check_capacity, lane_bits
    from host.thc.table import DEFAULT_TABLE, optimal_table, predicted_nmse


__getattr__ = lazy_getattr(globals(), _EXPORTS)
