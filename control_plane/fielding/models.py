"""Small numpy models for the offline harness: softmax regression and a one-hidden-layer MLP.

Parameters are one flat float64 vector so that FedAvg (a weighted mean), update norms and
cosine similarities (CFL) are plain vector operations. Local training is minibatch SGD on the
cross-entropy loss (McMahan et al., FedAvg, AISTATS 2017).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Bytes per parameter on the wire (float32).
BYTES_PER_PARAM = 4


@dataclass(frozen=True)
class Model:
    """Softmax regression (``hidden=0``) or an MLP with one tanh hidden layer."""

    n_features: int
    n_classes: int
    hidden: int = 0

    @property
    def size(self) -> int:
        """Number of parameters."""
        if self.hidden == 0:
            return (self.n_features + 1) * self.n_classes
        return (self.n_features + 1) * self.hidden + (self.hidden + 1) * self.n_classes

    @property
    def nbytes(self) -> int:
        """Bytes of one model (or one update) on the wire."""
        return self.size * BYTES_PER_PARAM

    def init(self, rng: np.random.Generator) -> np.ndarray:
        """Small random parameters (Glorot-like scale)."""
        if self.hidden == 0:
            return np.zeros(self.size)
        w = np.zeros(self.size)
        D, H = self.n_features, self.hidden
        w[: D * H] = rng.standard_normal(D * H) / np.sqrt(D)
        o = (D + 1) * H
        w[o : o + H * self.n_classes] = rng.standard_normal(H * self.n_classes) / np.sqrt(H)
        return w

    def _unpack(self, w: np.ndarray):
        D, C, H = self.n_features, self.n_classes, self.hidden
        if H == 0:
            return w[: D * C].reshape(D, C), w[D * C :]
        W1 = w[: D * H].reshape(D, H)
        b1 = w[D * H : (D + 1) * H]
        o = (D + 1) * H
        W2 = w[o : o + H * C].reshape(H, C)
        b2 = w[o + H * C :]
        return W1, b1, W2, b2

    def logits(self, w: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Class scores, shape (n, C)."""
        p = self._unpack(w)
        if self.hidden == 0:
            return X @ p[0] + p[1]
        return np.tanh(X @ p[0] + p[1]) @ p[2] + p[3]

    def loss_grad(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Mean cross-entropy and its gradient with respect to ``w``."""
        n = len(y)
        p = self._unpack(w)
        if self.hidden == 0:
            Z = X @ p[0] + p[1]
        else:
            Hh = np.tanh(X @ p[0] + p[1])
            Z = Hh @ p[2] + p[3]
        Z = Z - Z.max(axis=1, keepdims=True)
        P = np.exp(Z)
        P /= P.sum(axis=1, keepdims=True)
        loss = float(-np.log(P[np.arange(n), y] + 1e-12).mean())
        G = P
        G[np.arange(n), y] -= 1.0
        G /= n
        if self.hidden == 0:
            return loss, np.concatenate([(X.T @ G).ravel(), G.sum(axis=0)])
        dW2 = Hh.T @ G
        db2 = G.sum(axis=0)
        dH = (G @ p[2].T) * (1 - Hh**2)
        dW1 = X.T @ dH
        db1 = dH.sum(axis=0)
        return loss, np.concatenate([dW1.ravel(), db1, dW2.ravel(), db2])

    def loss(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        """Mean cross-entropy."""
        Z = self.logits(w, X)
        Z = Z - Z.max(axis=1, keepdims=True)
        logp = Z - np.log(np.exp(Z).sum(axis=1, keepdims=True))
        return float(-logp[np.arange(len(y)), y].mean())

    def accuracy(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        """Fraction of correct predictions."""
        return float((self.logits(w, X).argmax(axis=1) == y).mean())


@dataclass(frozen=True)
class LocalTraining:
    """Client-side SGD settings shared by every method of the harness."""

    epochs: int = 3
    batch_size: int = 16
    lr: float = 0.5


def local_train(
    model: Model,
    w: np.ndarray,
    X: np.ndarray,
    y: np.ndarray,
    cfg: LocalTraining,
    rng: np.random.Generator,
) -> np.ndarray:
    """Run ``cfg.epochs`` of minibatch SGD from ``w``; returns new parameters."""
    w = w.copy()
    n = len(y)
    for _ in range(cfg.epochs):
        order = rng.permutation(n)
        for start in range(0, n, cfg.batch_size):
            idx = order[start : start + cfg.batch_size]
            _, g = model.loss_grad(w, X[idx], y[idx])
            w -= cfg.lr * g
    return w


def weighted_mean(vectors: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """FedAvg aggregation: sample-weighted mean of parameter vectors."""
    wts = np.asarray(weights, dtype=float)
    return np.average(np.stack(vectors), axis=0, weights=wts / wts.sum())
