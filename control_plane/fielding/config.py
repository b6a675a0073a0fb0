"""Explicit, logged parameters of FIELDING.

The public descriptions of FIELDING (Li et al., "Fielding: Clustered Federated Learning with
Data Drift", AISTATS 2026, arXiv 2411.01580) fix the shape of the method but not every number.
Each choice the paper leaves open is a field here, with a stated default (no code of the
authors is public), and :meth:`FieldingConfig.log` writes them all.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: Representations a client can compute (see :mod:`control_plane.fielding.representation`).
REPRESENTATIONS = ("hist", "hist+embed")
#: Feature maps of the embedding block (see :mod:`control_plane.fielding.representation`).
EMBED_MAPS = ("linear", "conv1d")
#: How a cluster created by a global re-clustering gets its first model.
INIT_POLICIES = ("nearest-centre", "max-overlap", "fresh")
#: The methods a comparison runs (:func:`control_plane.fielding.harness.compare`); here, not
#: in the harness, so ``netco fielding run`` checks ``--methods`` without scikit-learn.
METHODS = ("fielding", "fedavg", "ifca", "cfl", "feddrift", "oracle")
#: Method names beyond :data:`METHODS`: an IFCA sweep point (``ifca-k4``: IFCA with K=4) and
#: FedDrift with a named start (``feddrift-global`` as published, ``feddrift-clusters``).
VARIANT = re.compile(r"^(ifca-k(?P<k>[1-9][0-9]?)|feddrift-(?P<start>global|clusters))$")


def is_method(name: str) -> bool:
    """Whether ``name`` is one of :data:`METHODS` or a :data:`VARIANT` (``ifca-k4``, ...)."""
    return name in METHODS or VARIANT.match(name) is not None


class ConfigError(ValueError):
    """A parameter is out of range; the message names the field and the fix."""


@dataclass(frozen=True)
class FieldingConfig:
    """Knobs of the FIELDING clustering (all logged when a run starts).

    Parameters
    ----------
    tau : float
        Drift threshold: a client is drifted when the L1 distance between its current
        representation and the one it had when last clustered exceeds ``tau``
        (reference: 0.1-0.2 for L1 on label histograms).
    theta : float
        Global re-clustering when more than this fraction of clients drifted in a round.
    epsilon : float
        Global re-clustering when the clustering cost after migration exceeds
        ``(1 + epsilon)`` times the cost of a fresh k-means clustering.
    k_max : int
        K is chosen by silhouette score over ``2..k_max`` (capped at clients - 1).
    representation : str
        ``"hist"`` (normalised label histogram, FIELDING v1) or ``"hist+embed"`` (histogram
        plus the class mass times the centred per-class mean of a fixed random sketch of the
        input, for feature and concept drift; a knob standing in for the v2/v3 form).
    embed_dim : int
        Width of the random sketch per class (``hist+embed`` only).
    embed_weight : float
        Weight of the embedding block in the L1 distance relative to the histogram block.
    embed_seed : int
        Seed of the random sketch; all clients must share it.
    embed_map : str
        ``"linear"``: the sketch is a random projection ``x @ R``; ``"conv1d"``: ``embed_dim``
        random 1-D convolution filters (length 9, zero mean) max-pooled over the sequence, a
        translation-invariant sketch for signals whose content moves (MNIST-1D).
    init_policy : str
        ``"nearest-centre"`` (reference default): a new cluster starts from the model of the
        old cluster whose centre is nearest to its centre; ``"max-overlap"``: from the old
        cluster that holds most of its members; ``"fresh"``: a cluster with a new id starts
        from the initial model (kept ids keep their model).
    kmeans_n_init : int
        k-means restarts per K.
    seed : int
        Seed of k-means.
    """

    tau: float = 0.15
    theta: float = 0.3
    epsilon: float = 0.1
    k_max: int = 8
    representation: str = "hist+embed"
    embed_dim: int = 8
    embed_weight: float = 8.0
    embed_seed: int = 1234
    embed_map: str = "linear"
    init_policy: str = "nearest-centre"
    kmeans_n_init: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.tau > 0:
            raise ConfigError(f"tau={self.tau}: must be > 0 (try 0.15)")
        if not 0 < self.theta <= 1:
            raise ConfigError(f"theta={self.theta}: must be in (0, 1] (try 0.3)")
        if not self.epsilon >= 0:
            raise ConfigError(f"epsilon={self.epsilon}: must be >= 0 (try 0.1)")
        if self.k_max < 2:
            raise ConfigError(f"k_max={self.k_max}: must be >= 2 (silhouette needs 2 clusters)")
        if self.representation not in REPRESENTATIONS:
            raise ConfigError(
                f"representation={self.representation!r}: choose one of {REPRESENTATIONS}"
            )
        if self.embed_dim < 1:
            raise ConfigError(f"embed_dim={self.embed_dim}: must be >= 1 (try 8)")
        if self.embed_weight < 0:
            raise ConfigError(f"embed_weight={self.embed_weight}: must be >= 0 (try 8.0)")
        if self.embed_map not in EMBED_MAPS:
            raise ConfigError(f"embed_map={self.embed_map!r}: choose one of {EMBED_MAPS}")
        if self.init_policy not in INIT_POLICIES:
            raise ConfigError(f"init_policy={self.init_policy!r}: choose one of {INIT_POLICIES}")
        if self.kmeans_n_init < 1:
            raise ConfigError(f"kmeans_n_init={self.kmeans_n_init}: must be >= 1 (try 5)")

    def as_dict(self) -> dict[str, object]:
        """All parameters as a plain dict (for JSON output)."""
        return dataclasses.asdict(self)

    def log(self, logger: logging.Logger | None = None) -> None:
        """Log every parameter at INFO, one line."""
        (logger or log).info(
            "FIELDING parameters: %s",
            ", ".join(f"{k}={v}" for k, v in self.as_dict().items()),
        )
