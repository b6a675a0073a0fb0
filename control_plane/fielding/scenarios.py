"""Offline drift scenarios: label, feature and concept drift on digits, MNIST-1D or a mixture.

A scenario is a set of data distributions ("specs", the true groups), a spec per client at the
start, and drift events that move a subset of clients to another spec at a chosen round. The
three kinds follow the drift taxonomy of the FIELDING paper (Li et al., arXiv 2411.01580):

* ``label``: specs differ in their class mix (85% of the mass on two classes, disjoint
  between specs as far as the classes go);
* ``feature``: specs share a uniform class mix but transform the inputs (digits: rotation by
  90/180/270 degrees, then brightness inversion; MNIST-1D: the sequence reversed, negated,
  shifted circularly by half its length, reversed and negated; synthetic: random orthogonal
  rotations);
* ``concept``: specs share inputs and class mix but permute the labels.

Two events: at round ``R//3 + 1`` a fraction ``move_frac`` of clients moves to another
*existing* spec (individual migration should suffice), and at round ``2R//3 + 1`` a fraction
``new_frac`` moves to a spec never seen before (clustering must change). A client that moves
gets fresh train and test data drawn from its new spec. All data are drawn up front from the
seed, so every method sees exactly the same clients.

Data sets: ``digits`` (scikit-learn's bundled 8x8 digits, 1,797 images, 64 features);
``mnist1d`` (Greydanus' MNIST-1D, the ``mnist1d`` package: 10,000 one-dimensional digit
signals of 40 points generated procedurally from ten templates with random padding, shear,
translation and correlated noise -- built by ``mnist1d.data.make_dataset`` in about two
seconds, nothing downloaded; much harder than digits: a linear model reaches about 0.3-0.4
and a small MLP about 0.6-0.7 centrally); ``synthetic`` (10 Gaussian classes in 20
dimensions).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

KINDS = ("label", "feature", "concept")
DATASETS = ("digits", "mnist1d", "synthetic")
#: Samples of MNIST-1D generated (the package's default is 5,000; more make the pool deeper).
MNIST1D_SAMPLES = 10_000
#: Seed of MNIST-1D's generator (the package's own default): the data set is fixed, and the
#: scenario seed decides the split and which samples each client draws, as with digits.
MNIST1D_SEED = 42


@dataclass(frozen=True)
class Spec:
    """One data distribution: class prior, input transform id, label permutation."""

    prior: np.ndarray
    transform: int
    perm: np.ndarray


@dataclass
class ClientData:
    """One client's data for a stretch of rounds."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    spec: int


@dataclass
class Scenario:
    """Data of all clients over all rounds, and the ground truth groups."""

    kind: str
    dataset: str
    n_clients: int
    rounds: int
    seed: int
    n_classes: int
    n_features: int
    specs: list[Spec]
    #: drift rounds (1-based) in increasing order
    events: list[int]
    #: client -> list of (first round, data); the first entry starts at round 1
    timeline: list[list[tuple[int, ClientData]]] = field(default_factory=list)

    def data(self, client: int, round_: int) -> ClientData:
        """The data client ``client`` holds at round ``round_`` (1-based)."""
        current = self.timeline[client][0][1]
        for start, d in self.timeline[client]:
            if start <= round_:
                current = d
        return current

    def groups(self, round_: int) -> np.ndarray:
        """True group (spec index) of every client at ``round_``."""
        return np.array([self.data(c, round_).spec for c in range(self.n_clients)])


@functools.lru_cache(maxsize=1)
def load_mnist1d() -> tuple[np.ndarray, np.ndarray]:
    """MNIST-1D built offline by the ``mnist1d`` package: ``(X, y)``, X of shape (10000, 40).

    ``make_dataset`` seeds NumPy's global generator; its state is restored afterwards.
    Raises ImportError naming the package when it is missing.
    """
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        msg = "dataset 'mnist1d' needs the mnist1d package: pip install mnist1d"
        raise ImportError(msg) from exc
    args = get_dataset_args()
    args.num_samples = MNIST1D_SAMPLES
    args.seed = MNIST1D_SEED
    state = np.random.get_state()
    try:
        d = make_dataset(args)
    finally:
        np.random.set_state(state)
    X = np.concatenate([d["x"], d["x_test"]]).astype(float)
    y = np.concatenate([d["y"], d["y_test"]]).astype(int)
    return X, y


def _pools(dataset: str, rng: np.random.Generator):
    if dataset in ("digits", "mnist1d"):
        if dataset == "digits":
            from sklearn.datasets import load_digits

            d = load_digits()
            X = d.data / 16.0
            y = d.target.astype(int)
        else:
            X, y = load_mnist1d()
        order = rng.permutation(len(y))
        cut = int(0.7 * len(y))
        tr, te = order[:cut], order[cut:]
        return (X[tr], y[tr]), (X[te], y[te]), 10, X.shape[1]
    C, D = 10, 20
    means = rng.standard_normal((C, D)) * 0.6

    def draw(n: int):
        y = rng.integers(0, C, size=n)
        return means[y] + rng.standard_normal((n, D)), y

    return draw(3000), draw(1500), C, D


def _transform(dataset: str, t: int, X: np.ndarray, rotations: list[np.ndarray]) -> np.ndarray:
    if t == 0:
        return X
    if dataset == "digits":
        if t in (1, 2, 3):
            imgs = X.reshape(-1, 8, 8)
            return np.rot90(imgs, k=t, axes=(1, 2)).reshape(len(X), 64)
        return 1.0 - X  # brightness inversion
    if dataset == "mnist1d":
        if t == 1:
            return X[:, ::-1].copy()  # time reversal
        if t == 2:
            return -X  # sign flip
        if t == 3:
            return np.roll(X, X.shape[1] // 2, axis=1)  # circular shift by half the length
        return -X[:, ::-1]  # reversed and negated
    return X @ rotations[t]


def _draw(pool, spec: Spec, n: int, rng: np.random.Generator, n_classes: int):
    X, y = pool
    by_class = [np.flatnonzero(y == c) for c in range(n_classes)]
    labels = rng.choice(n_classes, size=n, p=spec.prior)
    idx = np.array([rng.choice(by_class[c]) for c in labels])
    return X[idx], spec.perm[y[idx]]


def make_scenario(
    kind: str,
    dataset: str = "digits",
    n_clients: int = 40,
    rounds: int = 30,
    seed: int = 0,
    n_groups: int = 4,
    n_train: int = 60,
    n_test: int = 40,
    move_frac: float = 0.2,
    new_frac: float = 0.25,
) -> Scenario:
    """Build a scenario (see the module docstring); raises ValueError naming a bad field."""
    if kind not in KINDS:
        raise ValueError(f"scenario={kind!r}: choose one of {KINDS}")
    if dataset not in DATASETS:
        raise ValueError(f"dataset={dataset!r}: choose one of {DATASETS}")
    if n_clients < 2 * n_groups:
        raise ValueError(f"clients={n_clients}: need at least {2 * n_groups} (2 per group)")
    if rounds < 3:
        raise ValueError(f"rounds={rounds}: need at least 3 (two drift events)")
    if not (0 <= move_frac <= 1 and 0 <= new_frac <= 1):
        raise ValueError("move_frac/new_frac must be in [0, 1]")
    rng = np.random.default_rng(seed)
    train_pool, test_pool, C, D = _pools(dataset, rng)
    rotations = [np.eye(D)] + [np.linalg.qr(rng.standard_normal((D, D)))[0] for _ in range(8)]
    uniform = np.full(C, 1.0 / C)
    identity = np.arange(C)
    specs: list[Spec] = []
    n_specs = n_groups + 1  # the last one appears only at the second event
    if kind == "label":
        order = rng.permutation(C)
        for g in range(n_specs):
            major = order[(2 * g + np.arange(2)) % C]
            prior = np.full(C, 0.15 / C)
            prior[major] += 0.85 / 2
            specs.append(Spec(prior / prior.sum(), 0, identity))
    elif kind == "feature":
        specs = [Spec(uniform, t, identity) for t in range(n_specs)]
    else:
        specs = [Spec(uniform, 0, identity)]
        specs += [Spec(uniform, 0, rng.permutation(C)) for _ in range(n_specs - 1)]

    def client_data(s: int) -> ClientData:
        Xtr, ytr = _draw(train_pool, specs[s], n_train, rng, C)
        Xte, yte = _draw(test_pool, specs[s], n_test, rng, C)
        t = specs[s].transform
        return ClientData(
            _transform(dataset, t, Xtr, rotations), ytr,
            _transform(dataset, t, Xte, rotations), yte, s,
        )

    initial = np.arange(n_clients) % n_groups
    timeline = [[(1, client_data(int(initial[c])))] for c in range(n_clients)]
    events = [rounds // 3 + 1, 2 * rounds // 3 + 1]
    # event 1: some clients move to another existing spec
    movers = rng.choice(n_clients, size=round(move_frac * n_clients), replace=False)
    for c in movers:
        old = int(initial[c])
        new = int(rng.choice([g for g in range(n_groups) if g != old]))
        timeline[c].append((events[0], client_data(new)))
    # event 2: some clients move to the unseen spec
    newcomers = rng.choice(n_clients, size=round(new_frac * n_clients), replace=False)
    for c in newcomers:
        timeline[c].append((events[1], client_data(n_groups)))
    return Scenario(kind, dataset, n_clients, rounds, seed, C, D, specs, events, timeline)
