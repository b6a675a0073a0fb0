"""Validation of the cost model against published training runs, and its calibration.

Data (iteration times derived from published throughput):

* Narayanan et al., SC'21, Table 1 (A100-80GB, 8 per DGX node, NVLink 300 GB/s per direction,
  8x200 Gb/s HDR per node; fp16, s = 2048, V = 51200, full recomputation, microbatch 1,
  interleaved schedule, no DP overlap, no distributed optimizer). Iteration time =
  eq. 3 FLOPs / (GPUs x achieved TFLOP/s). The paper does not list the number of chunks v; we
  assume the largest divisor of L/p that is <= 4 and keeps m a multiple of p.
* NVIDIA NeMo 24.12 performance summary (H100-80GB SXM, FP8, 400 Gb/s per GPU): GPT3-175B at
  128 and 512 GPUs and LLAMA2-70B at 64 GPUs. Iteration time = GBS x seq /
  (GPUs x tokens/s/GPU). The two NeMo rows without a global batch (LLAMA2-13B, LLAMA3-70B) are
  not used. NeMo rows are never used for calibration: they test transfer to another GPU and
  dtype with the A100-calibrated constants.

Calibration fits the three global constants of :class:`cost.Efficiency` (η_max, h₀, η_net) by
least squares on log(predicted/measured) over the odd rows of Table 1 (1.7B, 7.5B, 39.1B,
145.6B, 529.6B); the even rows and the NeMo rows are held out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from control_plane.scaleacross import formulas as fm
from control_plane.scaleacross.cost import Efficiency, evaluate
from control_plane.scaleacross.plan import resolve_plan
from control_plane.scaleacross.scenario import Scenario, parse_scenario

__all__ = ["ROWS", "Row", "calibrate", "run_validation"]

A100 = {"peak_tflops": 312, "memory_gb": 80, "gpus_per_node": 8, "nvlink_gbps": 2400,
        "nic_gbps": 200, "hbm_gb_s": 2039}
H100_FP8 = {"peak_tflops": 1979, "memory_gb": 80, "gpus_per_node": 8, "nvlink_gbps": 3600,
            "nic_gbps": 400, "hbm_gb_s": 3350}


@dataclass(frozen=True)
class Row:
    name: str
    source: str
    model: dict
    hardware: dict
    tp: int
    pp: int
    gpus: int
    batch: int
    dtype: str
    recompute: str
    interleave: int | None = None  # None: the Table 1 rule (see the module docstring)
    microbatch: int = 1
    cp: int = 1
    tflops: float | None = None  # achieved TFLOP/s per GPU (Table 1)
    tokens_s_gpu: float | None = None  # tokens/s per GPU (NeMo)
    calibrate: bool = False

    def scenario(self) -> Scenario:
        d = self.gpus // (self.tp * self.pp * self.cp)
        m = self.batch // (self.microbatch * d)
        v = self.interleave
        if v is None:
            per = self.model["layers"] // self.pp
            v = max(x for x in range(1, 5) if per % x == 0 and (x == 1 or m % self.pp == 0)) \
                if self.pp > 1 else 1
        raw = {
            "model": self.model, "hardware": self.hardware,
            "cluster": {"buildings": [{"gpus": self.gpus}]},
            "training": {"dtype": self.dtype},
            "parallel": {"tp": self.tp, "pp": self.pp, "dp": d, "cp": self.cp,
                         "microbatch": self.microbatch, "global_batch": self.batch,
                         "interleave": v, "recompute": self.recompute, "zero": 0,
                         "overlap_dp": False, "dp_sync": "ring",
                         "sequence_parallel": self.dtype == "fp8"},
        }
        return parse_scenario(raw, name=self.name)

    def measured_s(self) -> float:
        sc = self.scenario()
        if self.tflops is not None:
            flops = fm.flops_per_iteration(sc.model, self.batch, "full")
            return flops / (self.gpus * self.tflops * 1e12)
        assert self.tokens_s_gpu is not None
        return self.batch * sc.model.seq / (self.gpus * self.tokens_s_gpu)


def _gpt(L: int, h: int, a: int) -> dict:
    return {"layers": L, "hidden": h, "heads": a, "seq": 2048, "vocab": 51200}


_T1 = "Narayanan et al. SC'21 Table 1"
_NEMO = "NVIDIA NeMo 24.12 performance summary"
_TABLE1 = [  # params(B), heads, h, L, t, p, GPUs, batch, TFLOP/s
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
ROWS: list[Row] = [
    Row(f"GPT-{pb}B", _T1, _gpt(L, h, a), A100, t, p, g, bs, "fp16", "full", tflops=tf,
        calibrate=i % 2 == 0)
    for i, (pb, a, h, L, t, p, g, bs, tf) in enumerate(_TABLE1)
]
_LLAMA70 = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672,
            "gated_mlp": True, "seq": 4096, "vocab": 32000}
ROWS += [
    Row("NeMo GPT3-175B 128 GPUs", _NEMO, _gpt(96, 12288, 96), H100_FP8, 4, 8, 128, 256, "fp8",
        "selective", interleave=6, microbatch=1, tokens_s_gpu=716),
    Row("NeMo GPT3-175B 512 GPUs", _NEMO, _gpt(96, 12288, 96), H100_FP8, 4, 8, 512, 2048, "fp8",
        "selective", interleave=6, microbatch=2, tokens_s_gpu=825),
    Row("NeMo LLAMA2-70B 64 GPUs", _NEMO, _LLAMA70, H100_FP8, 4, 4, 64, 128, "fp8",
        "selective", interleave=20, microbatch=1, tokens_s_gpu=1728),
]


def _predict(rows: list[Row], eff: Efficiency) -> np.ndarray:
    out = []
    for r in rows:
        sc = r.scenario()
        out.append(float(evaluate(sc, resolve_plan(sc, eff).to_arrays(), eff)["iteration_s"][0]))
    return np.asarray(out)


def calibrate(rows: list[Row] | None = None) -> Efficiency:
    """Fit (η_max, h₀, η_net) on ``rows`` (default: the calibration rows of :data:`ROWS`)."""
    rows = rows if rows is not None else [r for r in ROWS if r.calibrate]
    meas = np.array([r.measured_s() for r in rows])

    def resid(x: np.ndarray) -> np.ndarray:
        eff = Efficiency(eta_max=x[0], h0=x[1] * 1000, eta_net=x[2])
        return np.log(_predict(rows, eff) / meas)

    sol = least_squares(resid, x0=[0.62, 0.6, 0.8], bounds=([0.2, 0.0, 0.2], [1.0, 20.0, 1.0]))
    return Efficiency(eta_max=float(sol.x[0]), h0=float(sol.x[1] * 1000), eta_net=float(sol.x[2]))


def _mape(err: np.ndarray) -> float:
    return float(np.mean(np.abs(err)) * 100) if err.size else float("nan")


def run_validation(eff: Efficiency | None = None) -> dict:
    """Calibrate (unless ``eff`` is given) and report per-row errors and held-out MAPE."""
    eff = eff or calibrate()
    pred = _predict(ROWS, eff)
    meas = np.array([r.measured_s() for r in ROWS])
    err = (pred - meas) / meas
    rows = []
    for r, pr, me, er in zip(ROWS, pred, meas, err, strict=True):
        rows.append({
            "name": r.name, "source": r.source, "gpus": r.gpus, "tp": r.tp, "pp": r.pp,
            "batch": r.batch, "used_for_calibration": r.calibrate,
            "measured_s": round(float(me), 4), "predicted_s": round(float(pr), 4),
            "error_pct": round(float(er) * 100, 2),
        })
    cal = np.array([r.calibrate for r in ROWS])
    t1 = np.array([r.source == _T1 for r in ROWS])
    return {
        "constants": {"eta_max": round(eff.eta_max, 5), "h0": round(eff.h0, 2),
                      "eta_net": round(eff.eta_net, 5)},
        "calibration_rows": [r.name for r in ROWS if r.calibrate],
        "rows": rows,
        "mape_calibration_pct": round(_mape(err[cal]), 2),
        "mape_heldout_table1_pct": round(_mape(err[~cal & t1]), 2),
        "mape_heldout_nemo_pct": round(_mape(err[~t1]), 2),
        "mape_heldout_all_pct": round(_mape(err[~cal]), 2),
    }
