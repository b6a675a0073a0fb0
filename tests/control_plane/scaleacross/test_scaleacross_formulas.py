"""Closed forms against hand-computed cases and Narayanan et al. Table 1."""

from __future__ import annotations

import math

import numpy as np
import pytest

from control_plane.scaleacross import formulas as fm
from control_plane.scaleacross.scenario import Model
from control_plane.scaleacross.validate import _TABLE1

GPT = Model(layers=24, hidden=2304, heads=24, seq=2048, vocab=51200)


@pytest.mark.parametrize("row", _TABLE1, ids=lambda r: f"{r[0]}B")
def test_parameter_count_reproduces_table1(row):
    pb, a, h, L = row[:4]
    params = fm.megatron_params(L, h, 51200, 2048)
    assert round(params / 1e9, 1) == pytest.approx(pb, abs=0.1)
    m = Model(layers=L, hidden=h, heads=a, seq=2048, vocab=51200)
    assert fm.model_params(m)["total"] == pytest.approx(params, rel=1e-12)


def test_flops_match_eq3_with_and_without_recompute():
    B, s, L, h, V = 512, GPT.seq, GPT.layers, GPT.hidden, GPT.vocab
    eq3 = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    assert fm.flops_per_iteration(GPT, B, "full") == pytest.approx(eq3, rel=1e-12)
    plain = 72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L))
    assert fm.flops_per_iteration(GPT, B, "none") == pytest.approx(plain, rel=1e-12)
    # selective recompute adds exactly one forward of the attention core
    extra = L * 4 * B * s * s * h
    assert fm.flops_per_iteration(GPT, B, "selective") - plain == pytest.approx(extra, rel=1e-9)


def test_moe_layer_costs_topk_capacity_times_the_mlp():
    dense = Model(layers=2, hidden=1024, heads=8, seq=1024, vocab=1000)
    moe = Model(layers=2, hidden=1024, heads=8, seq=1024, vocab=1000, experts=8, top_k=2,
                capacity_factor=1.25)
    fd = fm.layer_flops_fwd(dense, 10.0)
    fmo = fm.layer_flops_fwd(moe, 10.0, moe=True)
    assert fmo["mlp"] == pytest.approx(fd["mlp"] * 2.5 + 2 * 10 * 1024 * 8)
    assert fm.model_params(moe)["expert"] == pytest.approx(2 * 8 * 2 * 1024 * 4096)


def test_bubble_fractions():
    assert fm.bubble_fraction(4, 8) == pytest.approx(3 / 8)
    assert fm.bubble_fraction(4, 8, 2) == pytest.approx(3 / 16)
    assert fm.bubble_fraction(1, 8) == 0


def test_collective_times_by_hand():
    # 1 GB over 4 ranks at 100 GB/s with 10 us per step
    t = fm.allreduce_time(1e9, 4, 100e9, 10e-6)
    assert float(t) == pytest.approx(2 * 3 / 4 * 1e9 / 100e9 + 6 * 10e-6)
    assert float(fm.alltoall_time(8e8, 8, 100e9, 0.0)) == pytest.approx(7 / 8 * 8e8 / 100e9)
    assert float(fm.allreduce_time(1e9, 1, 1e9, 1.0)) == 0.0
    assert float(fm.bus_factor("allreduce", 8)) == pytest.approx(1.75)
    assert float(fm.bus_factor("reducescatter", 8)) == pytest.approx(0.875)
    assert float(fm.bus_factor("ina", 8)) == pytest.approx(7 / 9)


def test_model_states_by_zero_stage():
    psi, d = 1e9, 8
    got = fm.model_state_bytes(psi, np.array([d] * 4), np.array([0, 1, 2, 3]))
    assert got.tolist() == pytest.approx([16e9, 4e9 + 12e9 / 8, 2e9 + 14e9 / 8, 16e9 / 8])


def test_activation_memory_korthikanti():
    s, b, h, a, t = 2048, 1, 4096, 32, 4
    sel = fm.activation_bytes_per_layer(s, b, h, a, t, True, 1)
    assert float(sel) == pytest.approx(34 * s * b * h / t)
    none = fm.activation_bytes_per_layer(s, b, h, a, t, True, 0)
    assert float(none) == pytest.approx(s * b * h * (34 / t + 5 * a * s / (h * t)))
    full = fm.activation_bytes_per_layer(s, b, h, a, t, False, 2)
    assert float(full) == pytest.approx(2 * s * b * h)
    assert math.isclose(float(fm.activation_bytes_per_layer(s, b, h, a, 1, False, 1)),
                        34 * s * b * h)
