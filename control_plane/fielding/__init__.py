"""FIELDING: clustered federated learning under data drift (Li et al., AISTATS 2026).

Framework-independent core: :mod:`.representation` (label histogram, sketch embeddings, L1),
:mod:`.clustering` (k-means, K by silhouette), :mod:`.clusterer` (drift detection, migration,
selective re-clustering), :mod:`.jobs` (clusters -> in-network aggregation jobs and their diff).
Harness: :mod:`.scenarios`, :mod:`.models`, :mod:`.methods` (baselines), :mod:`.harness`.
Flower: :mod:`.flower` (imported on demand; needs ``flwr``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from host.lazy import lazy_getattr

#: Imported on first use (PEP 562): ``netco fielding --help`` and its usage errors load
#: :mod:`.config` only, not scikit-learn (issue 36).
_EXPORTS = {
    "ClusterUpdate": "control_plane.fielding.clusterer",
    "FieldingClusterer": "control_plane.fielding.clusterer",
    "carry_models": "control_plane.fielding.clusterer",
    "ConfigError": "control_plane.fielding.config",
    "FieldingConfig": "control_plane.fielding.config",
    "diff_jobs": "control_plane.fielding.jobs",
    "jobs_for": "control_plane.fielding.jobs",
}

if TYPE_CHECKING:  # pragma: no cover
    from control_plane.fielding.clusterer import ClusterUpdate, FieldingClusterer, carry_models
    from control_plane.fielding.config import ConfigError, FieldingConfig
    from control_plane.fielding.jobs import diff_jobs, jobs_for

__all__ = [
    "ClusterUpdate",
    "ConfigError",
    "FieldingClusterer",
    "FieldingConfig",
    "carry_models",
    "diff_jobs",
    "jobs_for",
]


__getattr__ = lazy_getattr(globals(), _EXPORTS)
