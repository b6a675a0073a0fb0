"""The paper-faithful protocol (issue 34 part 2): baselines never told the true number of groups,
the drift kinds changing what they should, MNIST-1D built offline, and the benchmark's JSON
carrying mean and spread per method (tiny configurations; nothing timed)."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from control_plane.fielding.config import METHODS, FieldingConfig, is_method
from control_plane.fielding.harness import BaselineParams, HarnessConfig, compare, make_method, run_method
from control_plane.fielding.methods import FedDrift
from control_plane.fielding.scenarios import (
    _draw,
    _transform,
    load_mnist1d,
    make_scenario,
)

REPO = Path(__file__).resolve().parents[3]


class _NoPeeking:
    """A scenario stand-in that fails on any attribute access."""

    def __getattr__(self, name):
        raise AssertionError(f"a baseline read scenario.{name}")


@pytest.mark.parametrize("name", [m for m in METHODS if m not in ("fielding", "oracle")]
                         + ["ifca-k2", "ifca-k8", "feddrift-global", "feddrift-clusters"])
def test_baselines_are_built_without_looking_at_the_scenario(name):
    method = make_method(name, _NoPeeking(), FieldingConfig(), BaselineParams())
    assert method.name == name


def test_ifca_k_comes_from_its_config_not_the_scenario():
    few = make_scenario("label", "synthetic", 12, 6, seed=0, n_groups=2)
    many = make_scenario("label", "synthetic", 30, 6, seed=0, n_groups=6)
    assert len(few.specs) != len(many.specs)
    for s in (few, many):
        assert make_method("ifca", s, FieldingConfig(), BaselineParams()).k == 4
        assert make_method("ifca", s, FieldingConfig(), BaselineParams(ifca_k=3)).k == 3
        assert make_method("ifca-k7", s, FieldingConfig(), BaselineParams()).k == 7
    res = compare(few, ("ifca", "ifca-k2"), cfg=HarnessConfig(target=0.5))
    assert res["methods"]["ifca"]["params"]["k"] == 4
    assert res["methods"]["ifca"]["models_per_round"] == [4] * 6
    assert res["methods"]["ifca-k2"]["params"]["k"] == 2


@pytest.mark.parametrize("name", ["ifca-k0", "ifca-", "feddrift-eager", "ifca-k100"])
def test_unknown_variants_are_refused(name):
    assert not is_method(name)
    with pytest.raises(ValueError, match="ifca-k<K>"):
        make_method(name, _NoPeeking(), FieldingConfig(), BaselineParams())


def test_feddrift_published_start_is_one_global_model():
    s = make_scenario("concept", "synthetic", 12, 6, seed=1, n_groups=2)
    cfg = HarnessConfig(target=0.5)
    glob = run_method(FedDrift(0.3, start="global"), s, cfg)
    split = run_method(FedDrift(0.3, start="clusters"), s, cfg)
    assert glob["models_per_round"][0] == 1
    assert split["models_per_round"][0] > 1
    with pytest.raises(ValueError, match="start"):
        FedDrift(0.3, start="eager")


@pytest.mark.parametrize("dataset", ["digits", "mnist1d", "synthetic"])
def test_drift_kinds_change_what_they_name(dataset):
    """label: only the class prior differs between specs; feature: only the input transform;
    concept: only the label map. Movers get another spec at the first event."""
    for kind, differs in (("label", "prior"), ("feature", "transform"), ("concept", "perm")):
        s = make_scenario(kind, dataset, 16, 6, seed=2)
        a, b = s.specs[0], s.specs[1]
        same = {"prior": np.allclose(a.prior, b.prior), "transform": a.transform == b.transform,
                "perm": np.array_equal(a.perm, b.perm)}
        assert not same.pop(differs), (kind, differs)
        assert all(same.values()), (kind, same)
        e = s.events[0]
        moved = [c for c in range(16) if s.data(c, e).spec != s.data(c, e - 1).spec]
        assert moved, kind


def test_concept_drift_relabels_the_same_inputs():
    s = make_scenario("concept", "synthetic", 16, 6, seed=0)
    pool = (np.random.default_rng(5).standard_normal((200, 4)), np.arange(200) % 10)
    x1, y1 = _draw(pool, s.specs[0], 50, np.random.default_rng(9), 10)
    x2, y2 = _draw(pool, s.specs[1], 50, np.random.default_rng(9), 10)
    assert np.array_equal(x1, x2)
    assert np.array_equal(y2, s.specs[1].perm[y1]) and not np.array_equal(y1, y2)


def test_mnist1d_feature_transforms():
    X = np.arange(12.0).reshape(3, 4)
    assert np.array_equal(_transform("mnist1d", 0, X, []), X)
    assert np.array_equal(_transform("mnist1d", 1, X, []), X[:, ::-1])
    assert np.array_equal(_transform("mnist1d", 2, X, []), -X)
    assert np.array_equal(_transform("mnist1d", 3, X, []), np.roll(X, 2, axis=1))
    assert np.array_equal(_transform("mnist1d", 4, X, []), -X[:, ::-1])


def test_mnist1d_loads_offline(monkeypatch):
    """Built from the package's templates with every socket refused; fixed, 10 balanced
    classes, and the global NumPy generator left as it was."""

    def refuse(*a, **k):
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    np.random.seed(123)
    before = np.random.random()
    np.random.seed(123)
    X, y = load_mnist1d.__wrapped__()
    assert np.random.random() == before
    assert X.shape == (10_000, 40) and y.shape == (10_000,)
    assert np.all(np.isfinite(X))
    assert sorted(np.unique(y)) == list(range(10))
    assert np.bincount(y).min() > 900
    X2, y2 = load_mnist1d.__wrapped__()
    assert np.array_equal(X, X2) and np.array_equal(y, y2)
    s = make_scenario("feature", "mnist1d", 16, 6, seed=0)
    assert s.n_features == 40 and s.data(0, 1).X_train.shape == (60, 40)


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "fielding.py"), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


def test_paper_benchmark_json_has_mean_and_spread_per_method():
    p = _bench("--paper", "--seeds", "0,1,2", "--clients", "12", "--rounds", "4",
               "--datasets", "synthetic", "--kinds", "label", "--table")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)["paper"]
    assert out["protocol"]["seeds"] == [0, 1, 2]
    assert out["protocol"]["tuning_seeds"]
    cell = out["cells"]["synthetic/label"]
    assert set(cell["methods"]) == set(out["protocol"]["methods"])
    for name, m in cell["methods"].items():
        fa, rt = m["final_accuracy"], m["rounds_to_target"]
        assert fa["n"] == 3 and fa["min"] <= fa["mean"] <= fa["max"] and fa["std"] >= 0, name
        assert 0 <= rt["reached"] <= 3 and 1 <= rt["mean"] <= 5, name
    assert cell["best_baseline"] not in ("fielding", "oracle")
    assert len(cell["gain_pp_per_seed"]) == 3
    assert isinstance(cell["target_gain_2pp_met"], bool)
    fixed = cell["gain_pp_if_ifca_k_fixed"]
    assert set(fixed) == {"2", "4", "8"}
    for k, v in fixed.items():  # one IFCA K at a time competes, never the best of the sweep
        assert v["best"] == f"ifca-k{k}" or not v["best"].startswith("ifca")
        assert v["gain_pp"] >= cell["gain_pp"] - 1e-9
    assert "| synthetic/label |" in p.stderr


def test_paper_protocol_evaluates_on_seeds_it_was_not_tuned_on():
    spec = importlib.util.spec_from_file_location("bench_fielding", REPO / "benchmarks" / "fielding.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    paper = bench.PAPER
    tuned = {s for seeds in paper["tuning_seeds"].values() for s in seeds}
    assert len(paper["seeds"]) >= 3 and not tuned & set(paper["seeds"])
    assert paper["clients"] >= 100 and "mnist1d" in paper["datasets"]
    assert {"ifca-k2", "ifca-k4", "ifca-k8", "feddrift-global"} <= set(paper["methods"])
    assert "ifca" not in paper["methods"]  # every IFCA runs with a K from the sweep


def test_paper_benchmark_bad_flags_name_the_flag():
    p = _bench("--paper", "--datasets", "cifar")
    assert p.returncode == 2 and "--datasets: unknown ['cifar']" in p.stderr
    assert "Traceback" not in p.stderr
    p = _bench("--paper", "--seeds", "1")
    assert p.returncode == 2 and "--seeds needs >= 2 seeds" in p.stderr


def test_cli_runs_an_ifca_sweep_on_mnist1d(capsys):
    from control_plane.cli.main import main

    rc = main(["fielding", "run", "--scenario", "label", "--dataset", "mnist1d", "--clients",
               "12", "--rounds", "3", "--methods", "ifca-k3,feddrift-global", "--hidden", "8",
               "--no-progress"])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("method"))
    rows = lines[head + 1:head + 3]
    assert [r.split()[0] for r in rows] == ["ifca-k3", "feddrift-global"]
    # columns line up whatever the length of the names
    assert rows[0].index(".") == rows[1].index(".")
    assert main(["fielding", "run", "--scenario", "label", "--ifca-k", "0"]) == 2
    assert "--ifca-k 0: must be >= 1" in capsys.readouterr().err


def test_conv1d_sketch_ignores_shifts_and_sees_reversal():
    from control_plane.fielding.config import ConfigError
    from control_plane.fielding.representation import sketch

    cfg = FieldingConfig(embed_map="conv1d")
    rng = np.random.default_rng(0)
    X = np.zeros((5, 40))
    X[:, 10:25] = rng.standard_normal((5, 15))
    shifted = np.roll(X, 7, axis=1)  # the signal moves inside its zero padding
    assert np.allclose(sketch(X, cfg), sketch(shifted, cfg))
    assert not np.allclose(sketch(X, cfg), sketch(X[:, ::-1], cfg))
    assert sketch(X, cfg).shape == (5, cfg.embed_dim)
    with pytest.raises(ValueError, match="embed_map='linear'"):
        sketch(np.zeros((2, 4)), cfg)
    with pytest.raises(ConfigError, match="embed_map"):
        FieldingConfig(embed_map="cnn")


def test_conv1d_representation_separates_mnist1d_concepts_better_than_linear():
    """Label-permuted MNIST-1D groups: the ratio of mean between-group to within-group L1
    distance of client representations (1: indistinguishable)."""
    from control_plane.fielding.representation import client_representation

    s = make_scenario("concept", "mnist1d", 40, 6, seed=7)
    g = s.groups(1)

    def ratio(cfg):
        R = np.array([client_representation(s.data(c, 1).X_train, s.data(c, 1).y_train, 10, cfg)
                      for c in range(40)])
        D = np.abs(R[:, None] - R[None]).sum(-1)
        same = (g[:, None] == g[None]) & ~np.eye(40, dtype=bool)
        return D[g[:, None] != g[None]].mean() / D[same].mean()

    lin, conv = ratio(FieldingConfig()), ratio(FieldingConfig(embed_map="conv1d"))
    assert conv > 1.4 and conv > lin + 0.2, (lin, conv)
