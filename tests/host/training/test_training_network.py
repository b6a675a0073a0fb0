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
    assert rep["worker_port"] > 0           # issue 33: every rank bound to the job's port
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


def test_the_embedded_switch_binds_every_rank_to_the_jobs_port():
    """Issue 33: ``netco train --aggregator network`` installs its embedded job with a
    ``worker_port`` and binds every rank to it (the sender binding names the port), so a
    process on a member's address holding the job's token but sending from another port is
    not obeyed: its START flood 2^30 rounds ahead (which stalls a job that takes it; the
    control case is in tests/control_plane/test_worker_port.py) leaves the next all-reduce
    exact. Before, the embedded job named no port."""
    import argparse
    import socket

    import torch

    from control_plane.cli import train as cli
    from host.thc import THCCodec
    from host.thc.config import THCConfig
    from host.thc.simulate import allreduce as simulated_allreduce
    from tests.support.transport import far_starts, run_workers, worker_data

    p = argparse.ArgumentParser()
    cli.configure(p)
    args = p.parse_args(["--task", "digits", "--aggregator", "network", "--workers", "2",
                         "--slots", "8"])
    codec = THCCodec()
    with network_for(args, THCConfig()) as net:
        net = session(net)
        assert net.worker_port > 0
        lines = cli.network_lines(args, net)
        assert f"UDP port {net.worker_port}" in lines[0]
        xs = worker_data(2, 8 * net.coords_per_packet, 4)
        aggs = [net.connect(r, 2) for r in range(2)]
        try:
            assert [a.ep.sock.getsockname() for a in aggs] == [(ip, net.worker_port)
                                                              for ip in net.ips]
            run_workers(2, lambda r: aggs[r].allreduce(xs[r], codec))
            flood = far_starts(net.job_id, net.token, net.num_slots,
                               int(aggs[0].window.next_round["data"].min()),
                               coords=net.coords_per_packet)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind((net.ips[0], 0))            # rank 0's address, another UDP port
                for d in flood:
                    s.sendto(d, net.switch[0])
            got = run_workers(2, lambda r: aggs[r].allreduce(xs[r], codec))
        finally:
            for a in aggs:
                a.close(finish=False)
    ref = simulated_allreduce(codec, xs, round=1).average
    assert all(torch.equal(g, ref) for g in got)


def test_cli_trains_through_an_operators_switch_bound_to_the_jobs_port(tmp_path, capsys):
    """The path of an operator's switch: ``netco switch`` running, ``netco controller apply
    --json`` of a file whose job names a ``worker_port``, then ``netco train --aggregator
    network --switch IP:PORT,IP:PORT --token T --worker-port P``: it trains through that
    switch with every rank bound to P (issue 33). Before, ``netco train --switch`` had no
    ``--worker-port``, and its ranks sent from ephemeral ports that such a job refuses."""
    from host.softswitch.launch import UdpSwitch, free_udp_port
    from tests.support.switchproc import job_config

    sw = UdpSwitch(tmp_path, 2)
    sw.start()
    try:
        ips = ["127.0.0.11", "127.0.0.12"]
        wport = free_udp_port(also=ips)
        path = job_config(tmp_path / "net.yaml", sw, members=2,
                          job={"num_slots": 32, "worker_port": wport})
        assert main(["controller", "apply", str(path), "--json"]) == 0
        token = json.loads(capsys.readouterr().out)["tokens"]["1"]
        out = tmp_path / "r.json"
        switches = ",".join(f"127.0.0.1:{p}" for _, p in sorted(sw.ports.items()))
        rc = main(["train", "--task", "digits", "--workers", "2", "--compressor", "thc",
                   "--aggregator", "network", "--switch", switches, "--worker-ips", ",".join(ips),
                   "--job-id", "1", "--slots", "32", "--token", str(token),
                   "--worker-port", str(wport), "--steps", "2", "--eval-every", "2",
                   "--no-progress", "--out", str(out)])
        assert rc == 0, capsys.readouterr().err
        rep = json.loads(out.read_text())
        assert rep["worker_port"] == wport and rep["summary"]["thc"]["aggregator"] == "network"
        assert f"UDP port {wport}" in capsys.readouterr().err
    finally:
        sw.stop()
