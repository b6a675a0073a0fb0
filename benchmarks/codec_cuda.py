#!/usr/bin/env python3
"""Check THC's torch path on a CUDA device against the CPU; print one JSON object.

For each size: encode on CPU and on CUDA with the same norms, seeds and worker; compare the
payloads bit for bit, the error-feedback residuals and the decodes; report the NMSE on the GPU
and the GPU times of encode/decode against ``x.clone()`` there. Needs a CUDA device; the
package is used from the source tree (``PYTHONPATH=.``), so no install is needed there.
"""

from __future__ import annotations

import json
import sys
import time

import torch

from host.thc.codec import THCCodec
from host.thc.table import DEFAULT_TABLE, predicted_nmse


def _cuda_time(fn, repeat: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def main() -> int:
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device"}))
        return 2
    dev = torch.device("cuda")
    codec = THCCodec(backend="torch")
    rows = []
    for n in (1000, (1 << 20) + 37, 1 << 22, 1 << 24):
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        norms = codec.chunk_norms(x)
        e_cpu = codec.encode(x, norms, worker=3, round=5, residual=True)
        xg = x.to(dev)
        e_gpu = codec.encode(xg, norms, worker=3, round=5, residual=True)
        same_payload = torch.equal(e_cpu.payload, e_gpu.payload.cpu())
        mismatch = int((e_cpu.payload != e_gpu.payload.cpu()).sum())
        res_diff = float((e_cpu.residual - e_gpu.residual.cpu()).abs().max())
        sums = codec.values(e_cpu) * 4
        d_cpu = codec.decode(sums, 4, norms, n, round=5)
        d_gpu = codec.decode(sums.to(dev), 4, norms, n, round=5)
        dec_diff = float((d_cpu - d_gpu.cpu()).abs().max())
        one = codec.decode(codec.values(e_gpu).to(dev), 1, norms, n, round=5)
        nmse = float(((one - xg) ** 2).sum() / (xg**2).sum())
        sums_g = sums.to(dev)
        row = {
            "elements": n,
            "payload_bit_exact": same_payload,
            "payload_bytes_differing": mismatch,
            "residual_max_abs_diff": res_diff,
            "decode_max_abs_diff": dec_diff,
            "decode_bit_exact": dec_diff == 0.0,
            "nmse_gpu": nmse,
        }
        if n >= 1 << 20:
            row["encode_s"] = _cuda_time(lambda: codec.encode(xg, codec.chunk_norms(xg), worker=0, round=0))  # noqa: B023
            row["decode_s"] = _cuda_time(lambda: codec.decode(sums_g, 4, norms, n, round=0))  # noqa: B023
            row["clone_s"] = _cuda_time(lambda: xg.clone())  # noqa: B023
            row["codec_over_clone"] = (row["encode_s"] + row["decode_s"]) / row["clone_s"]
        rows.append(row)
    out = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "predicted_nmse": predicted_nmse(DEFAULT_TABLE, 30, 1 / 32)["nmse"],
        "rows": rows,
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
