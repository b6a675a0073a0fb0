"""``netco train --aggregator network``: the same THC training through the software target.

The switch sums exactly what torch.distributed sums (the same integer table values, the same
agreed norms), so a run through the network must follow the torch.distributed run bit for bit.
"""

from __future__ import annotations

import json

from control_plane.cli.main import main
from control_plane.cli.train import network_for, session
from host.ddp.baselines import CompressorSpec
from host.training.harness import TrainConfig, train


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
    capsys.readouterr()


def test_cli_network_refuses_bad_switch(capsys):
    rc = main(["train", "--task", "digits", "--workers", "2", "--aggregator", "network",
               "--switch", "nowhere", "--steps", "2"])
    assert rc == 2
    assert "--switch" in capsys.readouterr().err
