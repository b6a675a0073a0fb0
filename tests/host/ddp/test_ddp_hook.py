"""The THC DDP hook and the torch.distributed aggregator, with 2 and 4 real gloo ranks.

Each world size starts its processes once (module fixture); every test asserts on what the
ranks returned. The ranks' code is in :mod:`tests.support.ddp_workers`.
"""

from __future__ import annotations

import pytest
import torch

from host.thc.codec import THCCodec
from host.thc.config import THCConfig
from host.thc.simulate import allreduce
from host.training.launch import run_workers
from tests.support import ddp_workers as W  # noqa: N812

# 4 ranks start four torch processes on the 2-core CI machine (~35 s): marked slow.
WORLDS = [2, pytest.param(4, marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=WORLDS, ids=lambda n: f"{n}ranks")
def ranks(request):
    n = request.param
    results = run_workers(W.hook_checks, n, timeout_s=120)
    for r in results:
        assert r.ok, f"rank {r.rank} failed: {r.error}"
    return n, [r.value for r in results]


def test_gloo_integer_sums_as_measured(ranks):
    """The facts the lane dtype choice rests on: int32 exact, uint8/int8 wrap, int16 refused."""
    n, vals = ranks
    g = vals[0]["gloo"]
    assert g["int32"] == [200 * n] * 3
    assert g["uint8"] == [(200 * n) % 256] * 3
    assert g["int8"] == [((100 * n + 128) % 256) - 128] * 3
    assert isinstance(g["int16"], str) and g["int16"].startswith("error")


def test_lane_sums_exact_in_narrowest_safe_dtype(ranks):
    n, vals = ranks
    for v in vals:
        lanes = v["lanes"]
        boundary = lanes[255 // n]
        assert boundary["equal"] and boundary["count"] == n
        assert boundary["dtypes"] == ["torch.uint8"]
        assert boundary["first"] == n * (255 // n)  # the largest sum, no wrap
        wide = lanes[200]
        assert wide["equal"] and wide["dtypes"] == ["torch.int32"] and wide["first"] == 200 * n
        assert "could wrap" in lanes["too_big"]
        assert lanes["max"] == [float(n - 1), 0.0]


def test_hook_average_vs_plain_allreduce(ranks):
    """THC's average of a fixed bucket is within THC's expected error of the exact average."""
    n, vals = ranks
    f = vals[0]["fixed"]
    exact = torch.stack([W.rank_vector(r) for r in range(n)]).mean(0)
    assert torch.allclose(f["exact"], exact, atol=1e-6)
    err = f["thc"] - exact
    nmse = float(err.square().sum() / exact.square().sum())
    # Per coordinate (THC reference): rounding variance ≈ 0.0131·M²/d, reduced by averaging n
    # independent roundings, plus clipping ≈ 0.0073·M²/d; M is the largest worker's norm.
    M2 = max(float(W.rank_vector(r).square().sum()) for r in range(n))
    bound = 2.0 * (0.0131 / n + 0.0073) * M2 / float(exact.square().sum())
    assert 0.001 < nmse < bound, (nmse, bound)
    # Every rank holds the same averaged bucket.
    for v in vals[1:]:
        assert torch.equal(v["fixed"]["thc"], f["thc"])


def test_hook_equals_the_protocol_simulation(ranks):
    """Bit for bit what host.thc.simulate computes for the same step (round 0) and bucket 0."""
    n, vals = ranks
    sim = allreduce(THCCodec(THCConfig()), [W.rank_vector(r) for r in range(n)], round=0, stream=0)
    assert torch.equal(vals[0]["fixed"]["thc"], sim.average)


def test_bytes_counted_per_step_match_wire_format(ranks):
    n, vals = ranks
    f = vals[0]["fixed"]
    lay = THCCodec(THCConfig()).layout(W.BUCKET_NUMEL)
    padded = lay.padded
    assert padded == 5120  # 5000 elements in blocks of 1024
    agree = 4 * (len(lay.chunks) + n)  # chunk norms + one non-finite flag per rank, float32
    assert f["history"] == [(0, padded // 2 + agree, padded + agree)]  # 4-bit up, 8-bit lanes down
    assert tuple(f["expected_bytes"]) == (padded // 2 + agree, padded + agree)
    # readable right after backward: the step just completed (they read 0 before)
    assert tuple(f["after_backward"]) == (padded // 2 + agree, padded + agree)


def test_error_memory_survives_bucket_rebuild(ranks):
    _, vals = ranks
    for v in vals:
        rb = v["rebuild"]
        trace, snaps = rb["trace"], rb["snapshots"]
        first = [t["keys"] for t in trace if t["iter"] == 0]
        second = [t["keys"] for t in trace if t["iter"] == 1]
        assert first != second, "DDP did not rebuild its buckets; the test model must force it"
        assert sorted(k for ks in first for k in ks) == sorted(k for ks in second for k in ks)
        for t in trace:
            if t["iter"] == 0:
                assert float(t["memory"].abs().max()) == 0.0
                continue
            before = snaps[t["iter"] - 1]
            want = torch.cat([before[k] for k in t["keys"]])
            assert torch.equal(t["memory"], want)
            assert float(want.abs().max()) > 0
        assert {k: m.numel() for k, m in snaps[-1].items()} == rb["sizes"]


def test_warmup_steps_run_uncompressed_then_thc(ranks):
    n, vals = ranks
    exact = torch.stack([W.rank_vector(r) for r in range(n)]).mean(0)
    w = vals[0]["warmup"]
    assert torch.allclose(w["grads"][0], exact, atol=1e-6)  # plain float average
    err = float((w["grads"][1] - exact).square().sum() / exact.square().sum())
    assert 0.001 < err < 0.05  # THC's error, not zero
    up, down = vals[0]["fixed"]["expected_bytes"]
    assert w["history"] == [(0, 4 * W.BUCKET_NUMEL, 4 * W.BUCKET_NUMEL), (1, up, down)]
    assert w["memory_keys"] == 1  # error memory starts with the first compressed step


def test_subnormal_chunk_is_sent_as_zero_and_kept_in_memory(ranks):
    """A chunk whose agreed norm is subnormal would overflow the codec's scale; the hook sends
    it as zeros and keeps it in the error memory, the other chunks are averaged as usual."""
    n, vals = ranks
    exact = torch.stack([W.tiny_vector(r) for r in range(n)]).mean(0)
    for r, v in enumerate(vals):
        g = v["tiny"]["grad"]
        assert torch.isfinite(g).all()
        assert float(g[1024:2048].abs().max()) == 0.0
        kept = v["tiny"]["memory"][1024:2048].double() * 1e41  # subnormals: compare scaled up
        want_kept = W.tiny_vector(r)[1024:2048].double() * 1e41
        assert float((kept - want_kept).norm()) < 0.01 * float(want_kept.norm())
        rest = torch.cat([g[:1024], g[2048:]])
        want = torch.cat([exact[:1024], exact[2048:]])
        assert float((rest - want).square().sum() / want.square().sum()) < 0.05


def test_nan_on_one_rank_raises_on_every_rank(ranks):
    n, vals = ranks
    for r, v in enumerate(vals):
        msg = v["nan"]["raised"]
        assert msg is not None, f"rank {r} did not raise"
        assert "NonFiniteGradientError" in msg
        assert f"rank(s) [{n - 1}] of {n}" in msg and "bucket 0" in msg
        assert ("element 1234" in msg) == (r == n - 1)
