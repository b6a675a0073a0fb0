"""Client representations and the L1 distance between them.

FIELDING v1 represents a client by its normalised label histogram and compares clients by L1
distance (Li et al., arXiv 2411.01580). Label histograms cannot see feature drift (inputs
change, labels do not) or concept drift (the input-to-label map changes), so the generalised
representation (the FIELDING v2/v3 direction; the exact form is a knob here) appends one block
built from a fixed random sketch ``z = x @ R`` of the inputs:

``r = [h,  (w/d) * (1/n) sum_i onehot(y_i) (x) (z_i - mean_i z_i)]``

``R`` is a shared ``D x d`` Gaussian matrix (seeded, entries N(0, 1/D)), ``w`` the embedding
weight and ``d`` the sketch width. With ``embed_map="conv1d"`` the sketch is instead ``d``
shared random 1-D filters max-pooled over the sequence (translation-invariant; for signals
like MNIST-1D whose content shifts, where a linear projection of the raw input barely
separates the groups). Row ``c`` of the block is the class mass times the centred
mean sketch of the inputs labelled ``c``: it moves when the inputs that carry a label change,
i.e. under feature drift (rotated inputs) and concept drift (permuted labels). Centring keeps
histogram sampling noise from leaking into the block; absent classes contribute zeros, so the
representation is one vector compared by plain L1. Being independent of any model, it moves
only when the data move. (Appending the uncentred mean sketch as well was tried: it made
rotations by 0/180 and 90/270 degrees look alike, and the silhouette then chose K=2 on the
digits feature-drift scenario.)
"""

from __future__ import annotations

import numpy as np

from control_plane.fielding.config import FieldingConfig

#: Bytes per number when a representation is sent (float32).
BYTES_PER_VALUE = 4


def label_histogram(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Normalised label histogram (sums to 1; all zeros for an empty client)."""
    counts = np.bincount(np.asarray(y, dtype=np.int64), minlength=n_classes)[:n_classes]
    total = counts.sum()
    return counts / total if total else counts.astype(float)


def sketch_matrix(n_features: int, dim: int, seed: int) -> np.ndarray:
    """The shared random sketch ``R`` (``n_features x dim``, entries N(0, 1/n_features))."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n_features, dim)) / np.sqrt(n_features)


#: Length of the random filters of the ``conv1d`` sketch.
CONV_WIDTH = 9


def conv_filters(dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The shared random filters of the ``conv1d`` sketch: ``dim`` zero-mean filters of
    length :data:`CONV_WIDTH` (N(0, 1)) and biases (U(-1, 1))."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((dim, CONV_WIDTH))
    return W - W.mean(axis=1, keepdims=True), rng.uniform(-1.0, 1.0, dim)


def sketch(X: np.ndarray, config: FieldingConfig) -> np.ndarray:
    """The per-sample sketch ``z`` (n x ``embed_dim``) under ``config.embed_map``."""
    if config.embed_map == "linear":
        return X @ sketch_matrix(X.shape[1], config.embed_dim, config.embed_seed)
    W, b = conv_filters(config.embed_dim, config.embed_seed)
    if X.shape[1] < CONV_WIDTH:
        raise ValueError(f"embed_map='conv1d' needs inputs of >= {CONV_WIDTH} values, got "
                         f"{X.shape[1]} (use embed_map='linear')")
    windows = np.lib.stride_tricks.sliding_window_view(X, CONV_WIDTH, axis=1)  # n x T x width
    return (windows @ W.T + b).max(axis=1)


def client_representation(
    X: np.ndarray, y: np.ndarray, n_classes: int, config: FieldingConfig
) -> np.ndarray:
    """Representation of one client's data under ``config.representation``.

    Parameters
    ----------
    X : ndarray, shape (n, D)
        Inputs (any fixed scaling shared by all clients).
    y : ndarray, shape (n,)
        Integer labels in ``0..n_classes-1``.
    n_classes : int
        Number of classes C.
    config : FieldingConfig
        Chooses ``"hist"`` (C numbers) or ``"hist+embed"`` (C + C*d numbers).
    """
    hist = label_histogram(y, n_classes)
    if config.representation == "hist":
        return hist
    X = np.asarray(X, dtype=float).reshape(len(y), -1)
    Z = sketch(X, config)
    mean = Z.mean(axis=0) if len(y) else np.zeros(config.embed_dim)
    onehot = np.zeros((len(y), n_classes))
    onehot[np.arange(len(y)), np.asarray(y, dtype=np.int64)] = 1.0
    joint = onehot.T @ (Z - mean) / max(len(y), 1)  # C x d, class mass x centred class mean
    return np.concatenate([hist, (config.embed_weight / config.embed_dim) * joint.ravel()])


def l1(a: np.ndarray, b: np.ndarray) -> float:
    """L1 distance (FIELDING's distance between client representations)."""
    return float(np.abs(np.asarray(a) - np.asarray(b)).sum())


def representation_bytes(n_classes: int, config: FieldingConfig) -> int:
    """Bytes of one representation on the wire (float32)."""
    n = n_classes if config.representation == "hist" else n_classes * (1 + config.embed_dim)
    return n * BYTES_PER_VALUE
