"""THC tables: the dynamic program against the artifact's test vectors."""

import numpy as np
import pytest

from host.thc.config import THCConfig
from host.thc.table import (
    DEFAULT_TABLE,
    clip_threshold,
    optimal_table,
    predicted_nmse,
    rounding_tables,
    table_cost,
)


def test_clip_threshold_default():
    assert clip_threshold(1 / 32) == pytest.approx(2.1538747, abs=1e-6)


@pytest.mark.parametrize(
    ("b", "g", "p", "expected"),
    [
        (3, 16, 1 / 32, (0, 3, 5, 7, 9, 11, 13, 16)),
        (3, 42, 1 / 1024, (0, 10, 15, 19, 23, 27, 32, 42)),
    ],
)
def test_dp_reproduces_artifact_tables(b, g, p, expected):
    assert optimal_table(b, g, p) == expected


def test_default_table_is_shipped_and_near_optimal():
    cfg = THCConfig()
    assert cfg.levels == DEFAULT_TABLE
    opt = optimal_table(4, 30, 1 / 32)
    assert opt[0] == 0 and opt[-1] == 30 and len(opt) == 16
    shipped = table_cost(DEFAULT_TABLE, 30, 1 / 32)
    best = table_cost(opt, 30, 1 / 32)
    assert best <= shipped <= 1.01 * best


def test_dp_is_optimal_against_random_tables():
    rng = np.random.default_rng(0)
    best = table_cost(optimal_table(3, 16, 1 / 32), 16, 1 / 32)
    for _ in range(200):
        inner = sorted(rng.choice(np.arange(1, 16), size=6, replace=False).tolist())
        assert table_cost((0, *inner, 16), 16, 1 / 32) >= best - 1e-12


def test_predicted_nmse_matches_reference():
    pred = predicted_nmse(DEFAULT_TABLE, 30, 1 / 32)
    assert pred["rounding"] == pytest.approx(0.0131, abs=3e-4)
    assert pred["clipping"] == pytest.approx(0.0073, abs=1e-4)
    assert pred["nmse"] == pytest.approx(0.0203, abs=3e-4)


def test_second_stage_rounding_is_unbiased_on_the_fine_grid():
    g, G = 30, 1001
    rt = rounding_tables(DEFAULT_TABLE, g, G)
    L = np.asarray(DEFAULT_TABLE, dtype=np.float64)
    expect = L[rt.lo] * (1 - rt.p_up) + L[rt.lo + 1] * rt.p_up
    v = np.arange(G) * g / (G - 1)
    assert np.max(np.abs(expect - v)) < 1e-5  # float32 probabilities


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="bits"):
        THCConfig(bits=0)
    with pytest.raises(ValueError, match="granularity"):
        THCConfig(bits=4, granularity=10)
    with pytest.raises(ValueError, match="block"):
        THCConfig(block=1000)
    with pytest.raises(ValueError, match="table"):
        THCConfig(table=(0, 1, 2))
    with pytest.raises(ValueError, match="clip_mass"):
        THCConfig(clip_mass=1.5)
