"""FIELDING: clustered federated learning under data drift (Li et al., AISTATS 2026).

Framework-independent core: :mod:`.representation` (label histogram, sketch embeddings, L1),
:mod:`.clustering` (k-means, K by silhouette), :mod:`.clusterer` (drift detection, migration,
selective re-clustering), :mod:`.jobs` (clusters -> in-network aggregation jobs and their diff).
Harness: :mod:`.scenarios`, :mod:`.models`, :mod:`.methods` (baselines), :mod:`.harness`.
Flower: :mod:`.flower` (imported on demand; needs ``flwr``).
"""

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
