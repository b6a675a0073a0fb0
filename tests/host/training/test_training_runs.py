"""Real training runs: N gloo worker processes on this machine, through ``train`` and the CLI."""

from __future__ import annotations

import json

import pytest

from control_plane.cli.main import main
from host.ddp.baselines import CompressorSpec
from host.ddp.hook import THCHookState
from host.training.harness import TrainConfig, TrainingError, train
from host.training.tasks import make_task


def _thc_bytes_per_step(task: str, workers: int) -> tuple[int, int]:
    """Wire bytes of one step when the whole model is one DDP bucket (small models)."""
    n = sum(p.numel() for p in make_task(task).build_model().parameters())
    return THCHookState().bytes_per_bucket(n, workers)


def test_nan_gradient_on_one_worker_stops_every_worker_with_a_clear_error():
    cfg = TrainConfig("digits", CompressorSpec("thc"), workers=2, steps=4, eval_every=2,
                      inject_nan=(1, 2), timeout_s=120)
    with pytest.raises(TrainingError) as info:
        train(cfg)
    errors = info.value.errors
    assert sorted(errors) == [0, 1]
    for rank, msg in errors.items():
        assert msg.startswith("NonFiniteGradientError")
        assert "step 2" in msg and "rank(s) [1] of 2" in msg, msg
        assert ("NaN or Inf value" in msg) == (rank == 1)


def test_cli_trains_charlm_with_thc_and_reports_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["train", "--task", "charlm", "--workers", "2", "--compressor", "thc", "--steps", "6",
               "--eval-every", "3", "--link-mbps", "100", "--json", "--out", str(out)])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text())["summary"] == rep["summary"]
    run = rep["runs"][0]
    recs = run["records"]
    assert [r["step"] for r in recs] == list(range(1, 7))
    assert [r["step"] for r in recs if r["metric"] is not None] == [3, 6]
    up, down = _thc_bytes_per_step("charlm", 2)
    assert all(r["bytes_sent"] == up and r["bytes_received"] == down for r in recs)
    s = rep["summary"]["thc"]
    assert s["uplink_vs_fp32"] < 1 / 7.8 and s["downlink_vs_fp32"] < 1 / 3.9  # 4 bits up, 8 down
    assert all(r["compute_s"] > 0 and r["comm_s"] >= 0 for r in recs)
    assert recs[-1]["loss"] < recs[0]["loss"] and recs[-1]["metric"] < 7.0  # it learns


@pytest.mark.slow
def test_digits_thc_within_one_point_of_uncompressed_accuracy():
    """Same seed, same 150 steps, 2 workers: THC's held-out accuracy within 1 pp of plain."""
    acc = {}
    for spec in (CompressorSpec("none"), CompressorSpec("thc")):
        r = train(TrainConfig("digits", spec, workers=2, seed=0, timeout_s=300))
        acc[spec.label] = r["records"][-1]["metric"]
    assert acc["none"] > 0.95
    assert abs(acc["thc"] - acc["none"]) <= 0.01, acc


@pytest.mark.slow
def test_four_workers_thc_trains_with_8_bit_lanes():
    r = train(TrainConfig("digits", CompressorSpec("thc"), workers=4, steps=40, eval_every=20,
                          timeout_s=300))
    up, down = _thc_bytes_per_step("digits", 4)
    recs = r["records"]
    assert all(x["bytes_sent"] == up and x["bytes_received"] == down for x in recs)
    padded = THCHookState().codec.layout(r["params"]).padded
    assert down - up == padded - padded // 2  # 8-bit lanes down (4·30 ≤ 255), 4 bits up
    assert recs[-1]["metric"] > 0.3  # learning: 3x chance after 40 short steps


@pytest.mark.slow
def test_baseline_bytes_are_what_the_hooks_all_reduce():
    r_fp16 = train(TrainConfig("digits", CompressorSpec("fp16"), workers=2, steps=3, timeout_s=300))
    n_params = r_fp16["params"]
    assert all(x["bytes_sent"] == 2 * n_params == x["bytes_received"] for x in r_fp16["records"])
    r_psgd = train(TrainConfig("digits", CompressorSpec("powersgd", rank=4), workers=2, steps=4,
                               timeout_s=300))
    # PowerSGD (Vogels et al. 2019) runs two plain steps, then sends P (n×r), Q (m×r) of each
    # matrix worth compressing ((n+m)·r·2 < n·m) and the other tensors uncompressed, in fp32.
    want = 0
    for p in make_task("digits").build_model().parameters():
        mat = p.detach().reshape(p.shape[0], -1)
        n, m = mat.shape
        r = min(n, m, 4)
        want += 4 * ((n + m) * r if (n + m) * r * 2 < n * m else n * m)
    sent = [x["bytes_sent"] for x in r_psgd["records"]]
    assert sent[:2] == [4 * n_params] * 2
    assert sent[2:] == [want] * 2
    assert want < n_params  # well below fp32's 4 bytes per parameter
