"""THC codec: statistical properties, both backends (THC reference, "Properties worth testing")."""

import math

import numpy as np
import pytest
import torch

from host.thc import fused
from host.thc.codec import NonFiniteError, THCCodec
from host.thc.config import THCConfig
from host.thc.feedback import ErrorFeedback
from host.thc.hadamard import fwht_
from host.thc.rng import sign_tensor, signs_key
from host.thc.simulate import allreduce
from host.thc.table import DEFAULT_TABLE, predicted_nmse

BACKENDS = ["torch"] + (["fused"] if fused.available() else [])


def roundtrip(codec, x, worker=0, rnd=0, norms=None):
    norms = codec.chunk_norms(x) if norms is None else norms
    enc = codec.encode(x, norms, worker=worker, round=rnd)
    return codec.decode(codec.values(enc), 1, norms, x.numel(), round=rnd, dtype=x.dtype)


def nmse(est, x):
    return float(((est.double() - x.double()) ** 2).sum() / (x.double() ** 2).sum())


def from_transformed(y: torch.Tensor, codec: THCCodec, rnd: int = 0) -> torch.Tensor:
    """The x whose rotated coordinates (round ``rnd``, one chunk) are exactly ``y``."""
    B = codec.layout(y.numel()).chunks[0].block
    D = sign_tensor(signs_key(codec.cfg.seed, 0, rnd), 0, y.numel())
    return fwht_(y, B) / math.sqrt(B) * D


@pytest.mark.skipif(not fused.available(), reason="fused C kernels not built")
@pytest.mark.parametrize("n", [1, 3, 1000, 4096, (1 << 20) + 37])
def test_fused_and_torch_paths_are_bit_exact(n):
    t, f = THCCodec(backend="torch"), THCCodec(backend="fused")
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    norms = t.chunk_norms(x)
    et = t.encode(x, norms, worker=3, round=7, residual=True)
    ef = f.encode(x, norms, worker=3, round=7, residual=True)
    assert torch.equal(et.payload, ef.payload)
    assert torch.equal(et.residual, ef.residual)
    sums = t.values(et) * 3
    assert torch.equal(t.decode(sums, 3, norms, n, round=7), f.decode(sums, 3, norms, n, round=7))
    counts = torch.randint(1, 5, (t.layout(n).padded,))
    assert torch.equal(t.decode(sums, counts, norms, n, round=7),
                       f.decode(sums, counts, norms, n, round=7))


def test_unbiased_inside_clip_range_at_one_over_sqrt_k(codec):
    d = 1024
    y = torch.rand(d, generator=torch.Generator().manual_seed(1)) * 2 - 1  # |z| <= sqrt(3) < T
    x = from_transformed(y, codec)
    norms = codec.chunk_norms(x)
    decs = torch.stack([roundtrip(codec, x, worker=w, norms=norms) for w in range(400)])
    e25 = nmse(decs[:25].mean(0), x)
    e400 = nmse(decs.mean(0), x)
    single = nmse(decs[0], x)
    assert e400 < 0.4 * e25  # 1/k in squared error: 25 -> 400 is 16x less, 1/sqrt(k) in norm
    assert e400 == pytest.approx(np.mean([nmse(d_, x) for d_ in decs[:50]]) / 400, rel=0.35)
    assert e400 < single / 100


def test_bias_beyond_clip_equals_clipping(codec):
    d = 1024
    g = torch.Generator().manual_seed(2)
    y = torch.rand(d, generator=g) * 2 - 1
    y[:8] = torch.tensor([9.0, -9.0, 7.0, -7.0, 6.0, -6.0, 5.0, -5.0])  # far beyond T
    x = from_transformed(y, codec)
    norms = codec.chunk_norms(x)
    scale = math.sqrt(d) / float(norms[0])
    T = codec.cfg.T
    clipped = from_transformed(torch.clamp(y * scale, -T, T) / scale, codec)
    mean = torch.stack([roundtrip(codec, x, worker=w, norms=norms) for w in range(300)]).mean(0)
    assert nmse(mean, clipped) < 0.002
    assert nmse(mean, x) > 10 * nmse(mean, clipped)


def test_nmse_gaussian_matches_prediction(codec):
    x = torch.randn(1 << 20, generator=torch.Generator().manual_seed(3))
    pred = predicted_nmse(DEFAULT_TABLE, 30, 1 / 32)["nmse"]
    assert nmse(roundtrip(codec, x), x) == pytest.approx(pred, rel=0.05)


def test_student_t_finite_and_better_than_uniform4():
    from host.thc.baselines import uniform4_codec

    torch.manual_seed(4)
    x = torch.distributions.StudentT(3.0).sample((1 << 18,))
    e_thc = nmse(roundtrip(THCCodec(), x), x)
    e_uni = nmse(roundtrip(uniform4_codec(), x), x)
    assert math.isfinite(e_thc)
    assert e_thc < e_uni


@pytest.mark.parametrize("n_workers", [2, 4, 9])
def test_homomorphic_sum_decodes_to_mean_of_decodes(codec, n_workers):
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(5000, generator=g) * (w + 1) for w in range(n_workers)]
    res = allreduce(codec, xs, round=2)
    assert res.lane_bits == (8 if n_workers * 30 <= 255 else 16)
    singles = []
    for w, x in enumerate(xs):
        enc = codec.encode(x, res.norms, worker=w, round=2)
        singles.append(codec.decode(codec.values(enc), 1, res.norms, x.numel(), round=2))
    torch.testing.assert_close(res.average, torch.stack(singles).mean(0), rtol=1e-4, atol=1e-4)


def test_partial_sums_decode_unbiased(codec):
    g = torch.Generator().manual_seed(6)
    xs = [torch.randn(2048, generator=g) + w for w in range(4)]
    target = torch.stack(xs[:3]).mean(0)
    means = torch.stack(
        [allreduce(codec, xs, round=r, contributors=[0, 1, 2]).average for r in range(200)]
    ).mean(0)
    full = allreduce(codec, xs, round=0).average
    assert nmse(means, target) < 0.002
    assert nmse(full, target) > 0.01  # the partial decode really targets the 3 contributors


def test_fixed_seeds_reproduce_bit_exactly(codec):
    x = torch.randn(3000, generator=torch.Generator().manual_seed(7))
    n = codec.chunk_norms(x)
    a = codec.encode(x, n, worker=1, round=4).payload
    assert torch.equal(a, codec.encode(x, n, worker=1, round=4).payload)
    assert not torch.equal(a, codec.encode(x, n, worker=2, round=4).payload)
    other = THCCodec(THCConfig(seed=43), backend=codec.backend)
    assert not torch.equal(a, other.encode(x, n, worker=1, round=4).payload)


def test_rounding_noise_of_two_workers_uncorrelated(codec):
    x = torch.randn(1 << 18, generator=torch.Generator().manual_seed(8))
    n = codec.chunk_norms(x)
    e1 = roundtrip(codec, x, worker=0, norms=n) - x
    e2 = roundtrip(codec, x, worker=1, norms=n) - x
    # Same input, so the clipping part is common: compare the rounding noise only.
    clipped_common = (e1 + e2) / 2
    r1, r2 = e1 - clipped_common, e2 - clipped_common
    assert float(torch.corrcoef(torch.stack([e1, e2]))[0, 1]) < 0.45
    # Rounding noise alone: independent workers give e1·e2 ≈ clipping² only.
    cov = float(((e1 - e1.mean()) * (e2 - e2.mean())).mean())
    var = float(e1.var())
    assert cov / var < 0.45
    assert float(r1.abs().sum()) > 0 and float(r2.abs().sum()) > 0


def test_rounding_noise_correlation_is_near_zero_inside_clip_range(codec):
    y = torch.rand(1 << 16, generator=torch.Generator().manual_seed(9)) * 2 - 1
    x = from_transformed(y, codec)
    n = codec.chunk_norms(x)
    e1 = roundtrip(codec, x, worker=0, norms=n) - x
    e2 = roundtrip(codec, x, worker=1, norms=n) - x
    assert abs(float(torch.corrcoef(torch.stack([e1, e2]))[0, 1])) < 0.03


def test_error_feedback_keeps_running_sum_close(codec):
    torch.manual_seed(10)
    d = 2048
    ef = ErrorFeedback(True)
    no_ef = ErrorFeedback(False)
    sum_in = torch.zeros(d)
    sum_out = torch.zeros(d)
    sum_out_plain = torch.zeros(d)
    worst = 0.0
    base = torch.randn(d) * torch.linspace(0.01, 3, d)  # skewed: clipping matters
    for r in range(1000):
        g = base + 0.1 * torch.randn(d)
        sum_in += g
        sum_out += allreduce(codec, [g], round=r, feedback=[ef]).average
        sum_out_plain += allreduce(codec, [g], round=r, feedback=[no_ef]).average
        worst = max(worst, float((sum_out - sum_in).norm()))
    scale = float(base.norm())
    assert worst < 3 * scale  # bounded: the gap is one round's residual, not growing
    assert float((sum_out - sum_in).norm()) == pytest.approx(ef.norm(), rel=1e-3)
    assert float((sum_out_plain - sum_in).norm()) > 20 * float((sum_out - sum_in).norm())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_dtypes_in_and_out(codec, dtype):
    x = torch.randn(4000, generator=torch.Generator().manual_seed(11)).to(dtype)
    out = roundtrip(codec, x)
    assert out.dtype == dtype
    assert nmse(out, x) < 0.03


def test_integer_input_refused(codec):
    with pytest.raises(TypeError, match="float"):
        codec.encode(torch.arange(10), torch.ones(1), worker=0, round=0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_names_the_chunk(codec, bad):
    c = THCCodec(THCConfig(chunk=1024), backend=codec.backend)
    x = torch.randn(5000)
    x[2500] = bad
    with pytest.raises(NonFiniteError, match=r"chunk 2 \(elements 2048\.\.3071\).*element 2500"):
        c.chunk_norms(x)


@pytest.mark.parametrize("n", [1, 2, 3, 1000, 1025, 3 * 1024 + 1])
def test_small_and_odd_sizes_and_special_vectors(codec, n):
    zero = torch.zeros(n)
    assert torch.equal(roundtrip(codec, zero), zero)
    const = torch.full((n,), 2.5)
    out = roundtrip(codec, const)
    assert out.shape == (n,)
    # Padding concentrates the energy in fewer blocks (n=1025 pads to 2048), so more is clipped.
    assert nmse(out, const) < (0.1 if n > 16 else 0.6)
    mean = torch.stack([roundtrip(codec, const, worker=w) for w in range(200)]).mean(0)
    # Averaging removes the rounding noise; what stays is the clipping bias (~0.0073 at most).
    assert nmse(mean, const) < min(0.015, nmse(out, const))


def test_full_length_transform_and_multi_chunk(codec):
    for cfg in (THCConfig(block=0, chunk=1 << 14), THCConfig(chunk=4096, block=1024)):
        c = THCCodec(cfg, backend=codec.backend)
        x = torch.randn(10_000, generator=torch.Generator().manual_seed(12))
        assert len(c.layout(x.numel()).chunks) == math.ceil(10_000 / cfg.chunk)
        assert nmse(roundtrip(c, x), x) < 0.03


def test_payload_is_four_bits_per_coordinate(codec):
    x = torch.randn(4096)
    enc = codec.encode(x, codec.chunk_norms(x), worker=0, round=0)
    assert enc.payload.numel() == 2048
    assert enc.payload.dtype == torch.uint8
    idx = codec.indices(enc)
    assert int(idx.max()) <= 15 and int(idx.min()) >= 0


def test_per_block_norms_follow_layer_scales(codec):
    """Energy that differs between blocks (layers) is scaled per block by default."""
    g = torch.Generator().manual_seed(13)
    scales = torch.logspace(-3, 1, 64).repeat_interleave(1024)
    x = torch.randn(64 * 1024, generator=g) * scales
    ref = THCCodec(THCConfig(chunk=1 << 20), backend=codec.backend)
    e_default = nmse(roundtrip(codec, x), x)
    e_reference = nmse(roundtrip(ref, x), x)
    assert e_default < 0.025
    assert e_reference > 2 * e_default


def test_subnormal_norm_chunk_encodes_as_zero(codec):
    x = torch.randn(3072, generator=torch.Generator().manual_seed(14))
    x[1024:2048] = 1e-44  # norm ~ 3e-43: √1024/M overflows float32
    norms = codec.chunk_norms(x)
    enc = codec.encode(x, norms, worker=0, round=0, residual=True)
    out = codec.decode(codec.values(enc), 1, norms, x.numel(), round=0)
    assert torch.isfinite(out).all() and torch.isfinite(enc.residual).all()
    assert float(out[1024:2048].abs().max()) == 0.0
    assert nmse(torch.cat([out[:1024], out[2048:]]), torch.cat([x[:1024], x[2048:]])) < 0.05


def test_huge_finite_input_refused_by_both_backends_alike():
    """A chunk norm near the float32 limit overflows the transform: one clear ValueError."""
    x = torch.full((1024,), 1e37)
    msgs = []
    for backend in BACKENDS:
        c = THCCodec(backend=backend)
        with pytest.raises(ValueError, match=r"chunk 0 .*too large") as err:
            c.chunk_norms(x)
        msgs.append(str(err.value))
        # A caller that brings its own norms (finite in float32) must not crash the kernels.
        with pytest.raises(ValueError, match=r"chunk 0 .*too large") as err:
            c.encode(x, torch.tensor([3.2e38]), worker=0, round=0, residual=True)
        msgs.append(str(err.value))
        with pytest.raises(ValueError, match="norm"):
            c.encode(torch.ones(1024), torch.tensor([float("inf")]), worker=0, round=0)
    assert len(set(msgs[0::2])) == 1 and len(set(msgs[1::2])) == 1


def test_norms_smaller_than_input_do_not_crash_the_kernels():
    """x far above the norms it is scaled with: the transform overflows, both paths refuse."""
    x = torch.full((1024,), 3e37)
    for backend in BACKENDS:
        with pytest.raises(ValueError, match=r"chunk 0 .*too large"):
            THCCodec(backend=backend).encode(x, torch.ones(1), worker=0, round=0)


def test_largest_accepted_input_encodes_finite():
    x = torch.randn(4096, generator=torch.Generator().manual_seed(15)) * 1e34
    for backend in BACKENDS:
        c = THCCodec(backend=backend)
        norms = c.chunk_norms(x)
        enc = c.encode(x, norms, worker=0, round=0, residual=True)
        out = c.decode(c.values(enc), 1, norms, x.numel(), round=0)
        assert torch.isfinite(out).all() and torch.isfinite(enc.residual).all()
        assert nmse(out, x) < 0.05
