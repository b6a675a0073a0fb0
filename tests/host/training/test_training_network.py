"""``netco train --aggregator network``: the same THC training through the software target.

The switch sums exactly what torch.distributed sums (the same integer table values, the same
agreed norms), so a run through the network must follow the torch.distributed run bit for bit.
"""

from __future__ import annotations

import json

import pytest

from control_plane.cli.main import main
from control_plane.cli.train import network_for, session
from host.ddp.baselines import CompressorSpec
from host.training.harness import TrainConfig, TrainingError, train


class _Args:
    aggregator = "network"
    switch = "embedded"
    workers = 2
    job_id = 3
    slots = 32
    policy = "exact"
    uplink = "values"      # the Tofino uplink: training must match torch.distributed all the same
    worker_ips = None


def test_network_training_follows_torch_distributed_exactly():
    base = TrainConfig(task="digits", spec=CompressorSpec("thc"), workers=2, steps=12, eval_every=6,
                       seed=5)
    ref = train(base)
    from host.thc.config import THCConfig

    with network_for(_Args(), THCConfig()) as net:
        assert net is not None
        got = train(TrainConfig(task="digits", spec=CompressorSpec("thc"), workers=2, steps=12,
                                eval_every=6, seed=5, network=session(net)))
    assert got["aggregator"] == "network" and ref["aggregator"] == "torch.distributed"
    assert [r["loss"] for r in got["records"]] == [r["loss"] for r in ref["records"]]
    assert got["records"][-1]["metric"] == ref["records"][-1]["metric"]
    params = got["params"]
    up = 1.0 if _Args.uplink == "values" else 0.5   # bytes per coordinate going up
    for r in got["records"]:
        # real datagrams: 8-bit values (or 4-bit indices) + headers + norms up, 8-bit lanes down
        assert params * up < r["bytes_sent"] < params * up * 1.4
        assert params < r["bytes_received"] < params * 1.4
    assert got["network_stats"]["min_count"] == 2


def test_cli_network_flag(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["train", "--task", "digits", "--workers", "2", "--compressor", "thc",
               "--aggregator", "network", "--steps", "4", "--eval-every", "4", "--json",
               "--out", str(out)])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["summary"]["thc"]["aggregator"] == "network"
    # issue 36: it says where the switch is and where metrics are (none here), and the
    # report's plot is beside it
    err = capsys.readouterr().err
    assert ("THC sums through the embedded software target on loopback at UDP "
            f"{rep['switch'][0]}") in err
    assert "no metrics served" in err
    assert rep["plot_path"] == str(out.with_suffix(".png"))
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_network_refuses_bad_switch(capsys):
    rc = main(["train", "--task", "digits", "--workers", "2", "--aggregator", "network",
               "--switch", "nowhere", "--steps", "2"])
    assert rc == 2
    assert "--switch" in capsys.readouterr().err


def test_network_nan_stops_every_worker_with_the_hooks_error():
    """The pipelined hook sums on a background thread: its error still reaches every rank as
    the hook's own (type and message), not as DDP's wrapper."""
    from host.thc.config import THCConfig

    with network_for(_Args(), THCConfig()) as net, pytest.raises(TrainingError) as info:
        train(TrainConfig(task="digits", spec=CompressorSpec("thc"), workers=2, steps=4,
                          eval_every=2, inject_nan=(1, 2), network=session(net), timeout_s=120))
    errors = info.value.errors
    assert sorted(errors) == [0, 1]
    for rank, msg in errors.items():
        assert msg.startswith("NonFiniteGradientError"), msg
        assert "step 2" in msg and "rank(s) [1] of 2" in msg, msg
        assert ("NaN or Inf value" in msg) == (rank == 1)


def test_pipelined_and_synchronous_hooks_agree_and_time_their_phases():
    from host.ddp.hook import PHASES
    from host.thc.config import THCConfig

    runs = {}
    with network_for(_Args(), THCConfig()) as net:
        for pipelined in (True, False):
            runs[pipelined] = train(TrainConfig(
                task="digits", spec=CompressorSpec("thc"), workers=2, steps=3, eval_every=3,
                seed=2, network=session(net), thc_pipelined=pipelined))
    assert [r["loss"] for r in runs[True]["records"]] == [r["loss"] for r in runs[False]["records"]]
    for pipelined, run in runs.items():
        for r in run["records"]:
            ph = r["phases"]
            assert set(ph) <= set(PHASES) and {"norms", "encode", "decode", "cpu"} <= set(ph)
            assert ("wait" in ph) == pipelined     # only the pipelined path waits on a thread
            assert all(v >= 0 for v in ph.values())
