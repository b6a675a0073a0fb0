"""The controller's desired-state file (YAML or TOML) → validated, frozen dataclasses.

:mod:`~control_plane.config.schema`
    the dataclasses (:class:`NetworkConfig` and its parts), :class:`ConfigError` and the
    limits and defaults the fields obey;
:mod:`~control_plane.config.validation`
    :func:`load_config` / :func:`parse_config`: read a file and check every field, collecting
    every problem into one :class:`ConfigError` whose lines each name the field and the fix;
:mod:`~control_plane.config.topology`
    graph algorithms over a validated network (:func:`shortest_paths`, :func:`derive_tree`),
    shared with routing and ScaleAcross.

``docs/controller.md`` documents every field with units, defaults and examples. The names
below are the package's public API: ``from control_plane.config import X``.
"""

from control_plane.config.schema import (
    DEFAULT_BMV2_JSON,
    DEFAULT_COORDS_PER_PACKET,
    DEFAULT_ELECTION_ID,
    DEFAULT_NUM_SLOTS,
    DEFAULT_P4INFO,
    DEFAULT_THC,
    MAX_GRANULARITY,
    MAX_JOB_ID,
    MAX_PORT,
    PACKET_WIDTHS,
    POLICIES,
    TARGETS,
    TOFINO_P4INFO,
    UDP_TARGETS,
    UPLINKS,
    VALUES_TARGETS,
    WIDE_TARGETS,
    ConfigError,
    ControllerSpec,
    HostSpec,
    JobSpec,
    LinkSpec,
    NetworkConfig,
    PathSpec,
    SwitchSpec,
    ThcParams,
    TlsSpec,
    TreeNode,
)
from control_plane.config.topology import derive_tree, shortest_paths
from control_plane.config.validation import load_config, parse_config

__all__ = [
    "DEFAULT_BMV2_JSON",
    "DEFAULT_COORDS_PER_PACKET",
    "DEFAULT_ELECTION_ID",
    "DEFAULT_NUM_SLOTS",
    "DEFAULT_P4INFO",
    "DEFAULT_THC",
    "MAX_GRANULARITY",
    "MAX_JOB_ID",
    "MAX_PORT",
    "PACKET_WIDTHS",
    "POLICIES",
    "TARGETS",
    "TOFINO_P4INFO",
    "UDP_TARGETS",
    "UPLINKS",
    "VALUES_TARGETS",
    "WIDE_TARGETS",
    "ConfigError",
    "ControllerSpec",
    "HostSpec",
    "JobSpec",
    "LinkSpec",
    "NetworkConfig",
    "PathSpec",
    "SwitchSpec",
    "ThcParams",
    "TlsSpec",
    "TreeNode",
    "derive_tree",
    "load_config",
    "parse_config",
    "shortest_paths",
]
