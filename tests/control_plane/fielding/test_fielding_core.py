"""FIELDING core: representations, k-means/silhouette, drift detection, migration, re-clustering."""

from __future__ import annotations

import numpy as np
import pytest

from control_plane.fielding.clusterer import FieldingClusterer, carry_models
from control_plane.fielding.clustering import kmeans_silhouette
from control_plane.fielding.config import ConfigError, FieldingConfig
from control_plane.fielding.representation import (
    client_representation,
    l1,
    label_histogram,
    representation_bytes,
)


def blobs(centres, per, noise, rng):
    pts, lab = [], []
    for k, c in enumerate(centres):
        pts.append(np.asarray(c) + noise * rng.standard_normal((per, len(c))))
        lab += [k] * per
    return np.vstack(pts), np.array(lab)


def test_label_histogram_and_l1():
    h = label_histogram(np.array([0, 0, 1, 3]), 4)
    assert np.allclose(h, [0.5, 0.25, 0, 0.25])
    assert l1(h, np.array([0, 0, 0, 1.0])) == pytest.approx(1.5)
    assert label_histogram(np.array([], dtype=int), 3).sum() == 0


def test_representation_sizes_and_sensitivity():
    rng = np.random.default_rng(0)
    X = rng.random((50, 16))
    y = rng.integers(0, 4, 50)
    hist_cfg = FieldingConfig(representation="hist")
    emb_cfg = FieldingConfig(embed_dim=3)
    assert client_representation(X, y, 4, hist_cfg).shape == (4,)
    assert client_representation(X, y, 4, emb_cfg).shape == (4 + 12,)
    assert representation_bytes(4, emb_cfg) == 16 * 4
    # concept drift (labels permuted, same inputs): histogram of a balanced set cannot see it,
    # the embedding can.
    yb = np.repeat(np.arange(4), 10)
    Xb = np.vstack([rng.random((10, 16)) + k for k in range(4)])
    perm = np.array([1, 2, 3, 0])[yb]
    assert l1(client_representation(Xb, yb, 4, hist_cfg),
              client_representation(Xb, perm, 4, hist_cfg)) == 0
    assert l1(client_representation(Xb, yb, 4, emb_cfg),
              client_representation(Xb, perm, 4, emb_cfg)) > 0.5


def test_kmeans_silhouette_finds_k():
    rng = np.random.default_rng(1)
    X, lab = blobs([[0, 0], [5, 0], [0, 5]], 10, 0.1, rng)
    res = kmeans_silhouette(X, k_max=6)
    assert res.k == 3
    # same partition up to renaming
    for k in range(3):
        assert len(set(res.labels[lab == k])) == 1
    assert kmeans_silhouette(np.zeros((5, 2)), 4).k == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [("tau", 0), ("theta", 1.5), ("k_max", 1), ("representation", "x"), ("epsilon", -1)],
)
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        FieldingConfig(**{field: value})


def test_config_logs_every_parameter(caplog):
    caplog.set_level("INFO")
    FieldingConfig().log()
    for name in FieldingConfig().as_dict():
        assert f"{name}=" in caplog.text


def _initial(rng, per=6):
    X, lab = blobs([[0, 0, 0], [4, 0, 0], [0, 4, 0]], per, 0.05, rng)
    return {i: X[i] for i in range(len(X))}, lab


def test_initial_clustering_and_no_drift():
    rng = np.random.default_rng(2)
    reps, _ = _initial(rng)
    cl = FieldingClusterer(FieldingConfig(tau=0.5))
    up = cl.observe(reps)
    assert up.reason == "initial" and up.reclustered
    assert len(cl.centres) == 3
    assert all(p is None for p in up.parents.values())
    cl.check_consistency()
    before = dict(cl.assignment)
    # small wiggles (below tau) are not drift
    up2 = cl.observe({c: r + 0.01 for c, r in reps.items()})
    assert up2.drifted == [] and up2.reason == "none"
    assert cl.assignment == before


def test_drifted_client_migrates_to_nearest_centre():
    rng = np.random.default_rng(3)
    reps, lab = _initial(rng)
    cl = FieldingClusterer(FieldingConfig(tau=0.5, theta=0.5))
    cl.observe(reps)
    target = cl.assignment[len(lab) - 1]  # a client of the third blob
    up = cl.observe({0: np.array([0.0, 4.0, 0.0])})  # client 0 moves to the third blob
    assert up.drifted == [0]
    assert up.reason == "migration" and not up.reclustered
    assert up.migrated[0][1] == target and cl.assignment[0] == target
    assert up.cost_after_migration <= (1 + cl.config.epsilon) * up.cost_fresh
    cl.check_consistency()


def test_new_group_triggers_cost_reclustering_with_nearest_parent():
    rng = np.random.default_rng(4)
    reps, _ = _initial(rng)
    cl = FieldingClusterer(FieldingConfig(tau=0.5, theta=0.5))
    cl.observe(reps)
    old_ids = set(cl.centres)
    movers = [0, 1, 6, 7, 12]  # from all three groups to a new far group, below theta
    new_rep = np.array([0.0, 0.0, 6.0])
    up = cl.observe({c: new_rep + 0.01 * i for i, c in enumerate(movers)})
    assert up.reclustered and up.reason == "cost"
    assert len(cl.centres) == 4
    new = [k for k in cl.centres if k not in old_ids]
    assert len(new) == 1
    assert {cl.assignment[c] for c in movers} == set(new)
    # the new cluster starts from the old cluster whose centre is nearest to its centre
    dists = {k: l1(cl.centres[new[0]], c) for k, c in up_old_centres(cl, up).items()}
    assert up.parents[new[0]] == min(dists, key=dists.get)
    # ids of clusters that barely changed are kept
    assert len(old_ids & set(cl.centres)) == 3
    cl.check_consistency()


def up_old_centres(cl, up):
    # the parent's centre before the update is not stored; recompute from members that did
    # not move (their representation did not change)
    return {k: np.mean([cl.reps[c] for c in m if c not in up.drifted], axis=0)
            for k, m in cl.clusters.items() if any(c not in up.drifted for c in m)}


def test_theta_triggers_global_reclustering():
    rng = np.random.default_rng(5)
    reps, _ = _initial(rng)
    cl = FieldingClusterer(FieldingConfig(tau=0.5, theta=0.3))
    cl.observe(reps)
    n = len(reps)
    movers = list(range(n // 2))  # half the clients drift, theta is 0.3
    up = cl.observe({c: reps[(c + 6) % n] for c in movers})
    assert up.reclustered and up.reason == "theta"
    cl.check_consistency()


def test_carry_models_uses_parents():
    from control_plane.fielding.clusterer import ClusterUpdate

    up = ClusterUpdate(parents={5: 1, 6: None}, removed=[2])
    models = {1: np.ones(2), 2: np.zeros(2), 3: np.full(2, 3.0)}
    out = carry_models(models, up, {1, 3, 5, 6}, init=lambda: np.full(2, -1.0), copy=np.copy)
    assert set(out) == {1, 3, 5, 6}
    assert np.allclose(out[5], 1) and out[5] is not models[1]
    assert np.allclose(out[6], -1) and out[3] is models[3]


@pytest.mark.parametrize("policy", ["nearest-centre", "max-overlap", "fresh"])
def test_init_policies_on_new_cluster(policy):
    rng = np.random.default_rng(4)
    reps, _ = _initial(rng)
    cl = FieldingClusterer(FieldingConfig(tau=0.5, theta=0.5, init_policy=policy))
    cl.observe(reps)
    old = set(cl.centres)
    up = cl.observe({c: np.array([0.0, 0.0, 6.0]) for c in [0, 1, 6, 7, 12]})
    assert up.reclustered
    new = next(k for k in cl.centres if k not in old)
    kept = [k for k in cl.centres if k in old]
    if policy == "fresh":
        assert up.parents[new] is None
        assert all(up.parents[k] == k for k in kept)
    else:
        assert up.parents[new] in old
