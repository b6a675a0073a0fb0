"""Pure mapping from clusters to per-cluster aggregation jobs and their difference."""

from __future__ import annotations

import pytest

from control_plane.fielding.jobs import diff_jobs, jobs_for


def test_one_job_per_nonempty_cluster():
    jobs = jobs_for({0: [3, 1], 1: [2], 2: []})
    assert set(jobs) == {"fielding-c0", "fielding-c1"}
    assert jobs["fielding-c0"].members == (1, 3)
    assert jobs["fielding-c1"].as_dict() == {"job_id": "fielding-c1", "cluster_id": 1,
                                             "members": [2]}


def test_first_install_adds_everything():
    _, diff = diff_jobs(None, {0: [1, 2], 1: [3]})
    assert [j.job_id for j in diff.added] == ["fielding-c0", "fielding-c1"]
    assert not diff.removed and not diff.changed and not diff.empty


def test_migration_changes_two_jobs_only():
    prev = {0: [1, 2, 3], 1: [4, 5], 2: [6]}
    cur = {0: [1, 2], 1: [3, 4, 5], 2: [6]}
    _, diff = diff_jobs(prev, cur)
    assert not diff.added and not diff.removed
    changes = {c.job_id: (c.joined, c.left) for c in diff.changed}
    assert changes == {"fielding-c0": ((), (3,)), "fielding-c1": ((3,), ())}
    assert diff.unchanged == ["fielding-c2"]


def test_reclustering_adds_and_removes():
    prev = {0: [1, 2], 1: [3, 4]}
    cur = {0: [1, 2], 7: [3], 8: [4]}
    _, diff = diff_jobs(prev, cur)
    assert [j.job_id for j in diff.added] == ["fielding-c7", "fielding-c8"]
    assert [j.job_id for j in diff.removed] == ["fielding-c1"]
    assert diff.unchanged == ["fielding-c0"]
    assert diff.as_dict()["removed"][0]["members"] == [3, 4]


def test_same_clustering_is_empty_diff():
    _, diff = diff_jobs({0: [1], 1: [2]}, {1: [2], 0: [1]})
    assert diff.empty


def test_client_in_two_clusters_is_rejected():
    with pytest.raises(ValueError, match="exactly one cluster"):
        jobs_for({0: [1, 2], 1: [2]})


def test_jobs_follow_the_clusterer():
    import numpy as np

    from control_plane.fielding import FieldingClusterer, FieldingConfig

    cl = FieldingClusterer(FieldingConfig(tau=0.5, theta=0.5))
    reps = {i: np.array([0.0, 0.0]) + 0.01 * i for i in range(4)}
    reps |= {i: np.array([5.0, 0.0]) + 0.01 * i for i in range(4, 8)}
    reps |= {i: np.array([0.0, 5.0]) + 0.01 * i for i in range(8, 12)}
    cl.observe(reps)
    before = cl.clusters
    cl.observe({0: np.array([5.0, 0.0])})
    _, diff = diff_jobs(before, cl.clusters)
    assert len(diff.changed) == 2 and not diff.added and not diff.removed
    assert sorted(len(c.joined) + len(c.left) for c in diff.changed) == [1, 1]
