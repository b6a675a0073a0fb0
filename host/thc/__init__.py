"""THC: Tensor Homomorphic Compression (Li et al., NSDI 2024). See ``shared/reference/thc.md``."""

from host.thc.codec import Encoded, NonFiniteError, THCCodec
from host.thc.config import THCConfig, THCConfigError
from host.thc.lanes import LaneOverflowError, aggregate_packed, check_capacity, lane_bits
from host.thc.table import DEFAULT_TABLE, optimal_table, predicted_nmse

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
