"""k-means with K chosen by silhouette, and the clustering cost FIELDING compares.

FIELDING re-clusters all clients with k-means, choosing K by the silhouette score over
``2..K_max`` (Li et al., arXiv 2411.01580). Silhouette is computed with the L1 (manhattan)
metric, FIELDING's distance; k-means itself minimises squared L2 as usual. The cost of a
clustering is the sum over clients of the L1 distance to the centre (member mean) of their
cluster; the re-clustering trigger compares this cost after migration with that of a fresh
clustering.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score

log = logging.getLogger(__name__)


@dataclass
class Clustering:
    """Result of :func:`kmeans_silhouette`: ``labels[i]`` in ``0..k-1`` for point ``i``."""

    labels: np.ndarray
    centres: np.ndarray
    k: int
    silhouette: float
    cost: float


def centres_of(X: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Member mean of every cluster ``0..k-1`` (zeros for an empty one)."""
    C = np.zeros((k, X.shape[1]))
    for j in range(k):
        members = X[labels == j]
        if len(members):
            C[j] = members.mean(axis=0)
    return C


def clustering_cost(X: np.ndarray, labels: np.ndarray, centres: np.ndarray) -> float:
    """Sum over points of the L1 distance to their cluster's centre."""
    return float(np.abs(X - centres[labels]).sum())


def kmeans_silhouette(
    X: np.ndarray, k_max: int, n_init: int = 5, seed: int = 0
) -> Clustering:
    """k-means on the rows of ``X`` with K in ``2..k_max`` maximising the L1 silhouette.

    Falls back to one cluster when fewer than three distinct points exist (silhouette is
    undefined there).
    """
    X = np.asarray(X, dtype=float)
    n_distinct = len(np.unique(np.round(X, 12), axis=0))
    upper = min(k_max, len(X) - 1, n_distinct)
    if len(X) < 3 or upper < 2:
        labels = np.zeros(len(X), dtype=int)
        centres = centres_of(X, labels, 1)
        return Clustering(labels, centres, 1, float("nan"), clustering_cost(X, labels, centres))
    best: Clustering | None = None
    for k in range(2, upper + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning on duplicate points
            km = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(X)
        labels = km.labels_.astype(int)
        if len(np.unique(labels)) < 2:
            continue
        score = float(silhouette_score(X, labels, metric="manhattan"))
        log.debug("k-means K=%d silhouette=%.4f", k, score)
        if best is None or score > best.silhouette:
            centres = centres_of(X, labels, k)
            best = Clustering(labels, centres, k, score, clustering_cost(X, labels, centres))
    if best is None:  # every K collapsed to one cluster
        labels = np.zeros(len(X), dtype=int)
        centres = centres_of(X, labels, 1)
        return Clustering(labels, centres, 1, float("nan"), clustering_cost(X, labels, centres))
    log.debug("k-means chose K=%d (silhouette %.4f)", best.k, best.silhouette)
    return best
