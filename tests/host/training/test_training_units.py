"""Parts of the training harness that need no worker processes: tasks, reports, CLI checks."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest
import torch

from control_plane.cli import train as cli
from host.aggregation import _Clock, lane_dtype
from host.ddp.baselines import CompressorSpec, compare_set
from host.errors import UsageError
from host.thc.lanes import LaneOverflowError
from host.training.report import gaps, link_seconds, plot_comparison, smoothed, summarize
from host.training.tasks import make_task, stdlib_corpus


def test_lane_dtype_never_lets_a_sum_wrap():
    assert lane_dtype(8, 30) == torch.uint8  # 240: the THC default up to 8 workers
    assert lane_dtype(9, 30) == torch.int32  # 270 > 255; gloo refuses int16
    assert lane_dtype(1, 255) == torch.uint8
    assert lane_dtype(2, 128) == torch.int32
    with pytest.raises(LaneOverflowError, match="int32"):
        lane_dtype(70_000, 65_535)


def test_clock_counts_overlapping_intervals_once():
    c = _Clock()
    for a, b in [(0.0, 1.0), (0.5, 1.5), (3.0, 4.0), (3.2, 3.4)]:
        c.add(a, b)
    assert c.take() == pytest.approx(2.5)
    assert c.take() == 0.0


@pytest.mark.parametrize("name", ["digits", "digits-wide", "charlm", "charlm-ngram"])
def test_batches_are_deterministic_and_disjoint_across_ranks(name):
    t1, t2 = make_task(name, seed=3), make_task(name, seed=3)
    x0, y0 = t1.batch(7, 0, 2)
    x0b, y0b = t2.batch(7, 0, 2)
    assert torch.equal(x0, x0b) and torch.equal(y0, y0b)
    x1, _ = t1.batch(7, 1, 2)
    assert not torch.equal(x0, x1)
    assert x0.shape[0] == t1.batch_per_worker
    if name == "digits":  # one epoch's permutation is split between ranks, no sample twice
        rows = {tuple(r.flatten().tolist()) for r in torch.cat([x0, x1])}
        assert len(rows) >= 2 * t1.batch_per_worker - 2  # the data set has a few duplicates


def test_models_are_identical_for_a_seed_and_small():
    for name, limit in (("digits", 60_000), ("charlm", 200_000)):
        a, b = make_task(name, seed=1).build_model(), make_task(name, seed=1).build_model()
        pa, pb = list(a.parameters()), list(b.parameters())
        assert all(torch.equal(p, q) for p, q in zip(pa, pb, strict=True))
        assert sum(p.numel() for p in pa) < limit


def test_digits_wide_is_communication_bound_and_learns_from_digits():
    t = make_task("digits-wide", seed=0)
    m = t.build_model()
    n = sum(p.numel() for p in m.parameters())
    assert n >= 5_000_000                     # >= 20 MB of fp32 gradient per step
    x, y = t.batch(0, 0, 4)
    assert x.shape == (32, 1, 8, 8) and t.loss(m, x, y).ndim == 0
    ev = t.evaluate(m)                        # untrained: near chance on 10 classes
    assert 0.0 <= ev.metric < 0.3
    assert isinstance(t.build_optimizer(m.parameters()), torch.optim.Adam)
    assert (t.default_target, t.default_steps) == (0.95, 50)


def test_charlm_ngram_is_embedding_heavy_and_its_gradient_is_not_low_rank():
    from host.training.tasks import ngram_buckets

    t = make_task("charlm-ngram", seed=0)
    m = t.build_model()
    assert sum(p.numel() for p in m.parameters()) >= 5_000_000
    assert m.emb.weight.numel() / sum(p.numel() for p in m.parameters()) > 0.99
    x, y = t.batch(0, 0, 4)
    # the k = 3 characters before every window come with it: the 4-grams' history
    assert x.shape == (t.batch_per_worker, t.context + 3) and y.shape == (t.batch_per_worker, t.context)
    assert torch.equal(x[:, 4:], y[:, :-1])             # y is x shifted by one character
    b = ngram_buckets(x, (1, 2, 3, 4), 1 << 16)
    assert b.shape == (t.batch_per_worker, t.context, 4)
    per = (1 << 16) // 4                                  # orders live in their own slices
    assert all(int(b[..., j].min()) >= j * per and int(b[..., j].max()) < (j + 1) * per
               for j in range(4))
    ev = t.evaluate(m)
    assert 5.0 < ev.metric < 9.0                          # untrained: near 7 bits per char
    # after a few steps, the embedding gradient of one worker's batch: a rank-4 approximation
    # (what PowerSGD r4 sends) holds well under the whole of its energy
    opt = t.build_optimizer(m.parameters())
    for step in range(8):
        opt.zero_grad()
        t.loss(m, *t.batch(step, 0, 4)).backward()
        opt.step()
    g = m.emb.weight.grad
    s = torch.linalg.svdvals(g[g.abs().sum(1) > 0]) ** 2
    assert float(s[:4].sum() / s.sum()) < 0.8
    assert t.default_eval_every == 1 and not t.higher_is_better


def test_charlm_corpus_is_fixed_text_from_the_stdlib():
    a, b = stdlib_corpus(50_000), stdlib_corpus(50_000)
    assert a == b and len(a) == 50_000
    assert "def " in a and "import " in a
    t = make_task("charlm")
    assert int(t.train_ids.max()) < 128 and len(t.test_ids) > 10 * t.context
    ev = t.evaluate(t.build_model())
    # An untrained model is near uniform over 128 symbols: about 7 bits per character.
    assert 5.0 < ev.metric < 9.0 and ev.metric == pytest.approx(ev.loss / math.log(2))


def _run(step: int, metric: float | None, sent: int, recv: int, compute: float) -> dict:
    return {"step": step, "loss": 1.0, "metric": metric, "eval_loss": 0.5 if metric else None,
            "bytes_sent": sent, "bytes_received": recv, "compute_s": compute, "comm_s": 0.01,
            "wall_s": compute + 0.01}


def test_summary_link_emulation_and_time_to_target():
    run = {"compressor": "x", "higher_is_better": True, "params": 1000, "records": [
        _run(1, 0.5, 500, 1000, 0.1), _run(2, None, 500, 1000, 0.9), _run(3, 0.9, 500, 1000, 0.1)]}
    s = summarize(run, target=0.8, link_mbps=8.0)
    # The median compute (0.1 s; the 0.9 s outlier is another process) plus the busier
    # direction on the link: 1000 B = 1 ms at 8 Mbit/s.
    per_step = 0.1 + link_seconds(500, 1000, 8.0)
    assert link_seconds(500, 1000, 8.0) == pytest.approx(1e-3)
    assert s["steps_to_target"] == 3
    assert s["emulated_to_target_s"] == pytest.approx(3 * per_step)
    assert s["uplink_vs_fp32"] == pytest.approx(500 / 4000)
    assert s["downlink_vs_fp32"] == pytest.approx(1000 / 4000)
    assert s["final_metric"] == 0.9
    assert s["compute_s"] == pytest.approx(1.1) and s["compute_s_median_step"] == pytest.approx(0.1)
    low = summarize({**run, "higher_is_better": False}, target=0.6)
    assert low["steps_to_target"] == 1 and low["emulated_to_target_s"] is None
    g = gaps({"none": {"final_metric": 0.98, "final_eval_loss": 2.0},
              "thc": {"final_metric": 0.97, "final_eval_loss": 2.02}}, higher_is_better=True)
    assert g["thc"]["metric_gap"] == pytest.approx(0.01)
    assert g["thc"]["loss_rel"] == pytest.approx(0.01)


def test_time_to_target_needs_the_smoothed_metric_not_one_lucky_evaluation():
    # a noisy edge: 0.951 at step 2, back under at 3 and 4, held from step 5 on
    metrics = [0.90, 0.951, 0.94, 0.945, 0.96, 0.962, 0.965]
    run = {"compressor": "x", "higher_is_better": True, "params": 1000,
           "records": [_run(i + 1, m, 500, 1000, 0.1) for i, m in enumerate(metrics)]}
    raw = summarize(run, target=0.95, time_basis="measured")
    assert raw["steps_to_target"] == 2 == raw["first_crossing_step"]
    s = summarize(run, target=0.95, time_basis="measured", window=3)
    # trailing means: ..., (0.945 + 0.96 + 0.962) / 3 = 0.9557 at step 6, 0.9490 at step 5
    assert smoothed(metrics, 3)[4] < 0.95 < smoothed(metrics, 3)[5]
    assert s["steps_to_target"] == 6 and s["first_crossing_step"] == 2
    assert s["time_to_target_s"] == pytest.approx(6 * 0.11)
    assert s["target_window"] == 3 and "last 3 evaluations" in s["target_rule"]
    # held: from step 6 on the mean never drops under again; a dip at the end moves it later
    assert summarize(run, target=0.95, time_basis="measured", window=3,
                     held=True)["steps_to_target"] == 6
    dip = {**run, "records": [*run["records"], _run(8, 0.90, 500, 1000, 0.1),
                              _run(9, 0.99, 500, 1000, 0.1), _run(10, 0.99, 500, 1000, 0.1)]}
    assert summarize(dip, target=0.95, window=3)["steps_to_target"] == 6
    # means at steps 8..10: 0.9417, 0.9517, 0.96: held only from step 9
    h = summarize(dip, target=0.95, window=3, held=True)
    assert h["steps_to_target"] == 9 and "stays" in h["target_rule"]
    # lower is better (bits per character): the same rule, the other way
    low = summarize({**run, "higher_is_better": False, "records": [
        _run(i + 1, m, 500, 1000, 0.1) for i, m in enumerate([3.5, 3.1, 3.3, 3.12, 3.1])]},
        target=3.15, time_basis="measured", window=2)
    assert low["first_crossing_step"] == 2 and low["steps_to_target"] == 5
    with pytest.raises(ValueError, match="window"):
        summarize(run, target=0.95, window=0)


def test_time_basis_labels_measured_and_emulated_times():
    run = {"compressor": "x", "higher_is_better": True, "params": 1000, "records": [
        _run(1, 0.5, 500, 1000, 0.1), _run(2, 0.9, 500, 1000, 0.3)]}
    emu = summarize(run, target=0.8, link_mbps=8.0)
    assert emu["time_basis"] == "emulated"
    assert emu["time_to_target_s"] == emu["emulated_to_target_s"]
    meas = summarize(run, target=0.8, time_basis="measured")   # on a shaped testbed
    assert meas["time_basis"] == "measured" and meas["emulated_s"] is None
    assert meas["time_to_target_s"] == pytest.approx(0.11 + 0.31) == meas["wall_to_target_s"]
    assert summarize(run, target=0.8)["time_basis"] == "measured"
    with pytest.raises(ValueError, match="needs link_mbps"):
        summarize(run, target=0.8, time_basis="emulated")
    with pytest.raises(ValueError, match="time_basis"):
        summarize(run, target=0.8, time_basis="guessed")


@pytest.mark.parametrize("basis", ["measured", "emulated"])
def test_plot_says_which_time_it_shows(tmp_path, monkeypatch, basis):
    import matplotlib.axes

    labels = []
    orig = matplotlib.axes.Axes.set_xlabel
    monkeypatch.setattr(matplotlib.axes.Axes, "set_xlabel",
                        lambda self, text, *a, **k: labels.append(text) or orig(self, text, *a, **k))
    runs = [{"task": "digits", "workers": 2, "seed": 0, "metric_name": "accuracy", "compressor": "x",
             "records": [_run(i, 0.1 * i, 100, 200, 0.01) | {"emulated_s": 0.1 * i}
                         for i in range(1, 4)]}]
    plot_comparison(runs, str(tmp_path / "p.png"), link_mbps=100.0, time_basis=basis)
    assert any(basis in lab for lab in labels)
    other = "emulated" if basis == "measured" else "measured"
    assert not any(other in lab for lab in labels)


def test_plot_writes_a_png(tmp_path):
    runs = [{"task": "digits", "workers": 2, "seed": 0, "metric_name": "accuracy", "compressor": c,
             "records": [_run(i, 0.1 * i, 100, 200, 0.01) | {"emulated_s": 0.1 * i}
                         for i in range(1, 6)]} for c in ("none", "thc")]
    out = tmp_path / "p.png"
    plot_comparison(runs, str(out), link_mbps=100.0, target=0.3)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_set_labels():
    assert [s.label for s in compare_set()] == ["none", "fp16", "powersgd-r1", "powersgd-r4",
                                                "thc", "thc-noef"]
    with pytest.raises(ValueError, match="compressor"):
        CompressorSpec("topk")


@pytest.mark.parametrize(("argv", "field"), [
    (["--workers", "0"], "--workers"),
    (["--link-mbps", "0"], "--link-mbps"),
    (["--steps", "-3"], "--steps"),
    (["--target-window", "0"], "--target-window"),
    (["--granularity", "3"], "granularity"),
    (["--workers", "70000", "--granularity", "65535"], "32-bit lane"),
    (["--testbed", "rack"], "--link-mbps"),
    (["--testbed", "rack", "--link-mbps", "100", "--start-iter", "2"], "--start-iter"),
    (["--testbed", "rack", "--link-mbps", "100", "--switch", "127.0.0.1:9"], "--switch"),
    (["--testbed", "mininet", "--link-mbps", "100", "--workers", "2"],
     "--workers=2: --testbed mininet has 4 hosts"),
    (["--testbed", "buildings"], "--testbed buildings: give --link-mbps"),
    (["--compressor", "thc", "--compare"], "--compressor thc with --compare"),
    (["--compressor", "none", "--aggregator", "network"], "--aggregator network sums THC"),
    (["--metrics-port", "9200"], "--metrics-port: .* add --aggregator network"),
    (["--metrics-port", "65535", "--workers", "2", "--aggregator", "network"], "--metrics-port=65535"),
    (["--aggregator", "network", "--switch", "127.0.0.1:9", "--workers", "2"],
     "--token: give the job's token"),   # issue 33 (7): a worker sent token 0, never accepted
])
def test_cli_rejects_bad_input_naming_the_field(argv, field):
    p = argparse.ArgumentParser()
    cli.configure(p)
    args = p.parse_args(["--task", "digits", *argv])
    with pytest.raises(UsageError, match=field):
        cli.run(args)


def test_cli_refuses_token_zero(capsys):
    """``--token 0`` is one line naming the flag: a job's token is never 0 (issue 33, 7)."""
    p = argparse.ArgumentParser()
    cli.configure(p)
    with pytest.raises(SystemExit):
        p.parse_args(["--task", "digits", "--token", "0"])
    assert "never 0" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["70000", "-1", "p"])
def test_cli_refuses_a_worker_port_out_of_range(capsys, value):
    p = argparse.ArgumentParser()
    cli.configure(p)
    with pytest.raises(SystemExit):
        p.parse_args(["--task", "digits", "--worker-port", value])
    assert "worker_port" in capsys.readouterr().err


def test_cli_worker_port_reaches_the_workers_spec():
    """``--switch IP:PORT --worker-port P``: every rank binds P, the job's worker_port (the
    switch binds each member to it; issue 33); without it, an ephemeral port."""
    from host.thc.config import THCConfig

    argv = ["--aggregator", "network", "--workers", "2", "--switch", "127.0.0.1:9",
            "--token", "7"]
    for extra, want in (([], 0), (["--worker-port", "29600"], 29600)):
        with cli.network_for(_train_args(*argv, *extra), THCConfig()) as net:
            assert net.worker_port == want and net.token == 7


def test_progress_writes_plain_lines_when_not_a_terminal():
    import io

    from host.training.progress import Progress

    out = io.StringIO()
    p = Progress(20, "digits/thc", out=out, tty=False)
    for step in range(20):
        if step == 9:
            p.show(accuracy="0.8123")
        p.update()
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "digits/thc: step 2/20"
    assert lines[-1] == "digits/thc: step 20/20, accuracy 0.8123"
    assert len(lines) == 10 and "\r" not in out.getvalue()


def test_progress_draws_a_bar_on_a_terminal():
    import io

    from host.training.progress import Progress

    out = io.StringIO()
    p = Progress(5, "digits/thc", out=out, tty=True)
    for _ in range(5):
        p.update()
    p.close()
    assert "\r" in out.getvalue() and "step 5/5" not in out.getvalue()


def test_plot_names_runs_as_the_tables_do(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    runs = [{"task": "digits", "workers": 2, "seed": 0, "metric_name": "accuracy", "compressor": c,
             "records": [_run(i, 0.1 * i, 100, 200, 0.01) | {"emulated_s": 0.1 * i}
                         for i in range(1, 6)]} for c in ("thc", "none")]
    plot_comparison(runs, str(tmp_path / "p.png"), link_mbps=100.0, target=0.3,
                    labels={"thc": "THC via switch", "none": "fp32 all-reduce"})
    (fig,) = figs
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "THC via switch", "fp32 all-reduce", "target accuracy 0.3"]
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert "THC via switch vs fp32 all-reduce" in fig._suptitle.get_text()


def _fake_runs(names=("none", "fp16", "powersgd-r1", "powersgd-r4", "thc", "thc-noef")):
    return [{"task": "digits", "workers": 2, "seed": 0, "metric_name": "accuracy", "compressor": c,
             "higher_is_better": True, "params": 1000,
             "records": [_run(i, 0.1 * i + 0.01 * k, 100, 200, 0.01) | {"emulated_s": 0.1 * i}
                         for i in range(1, 8)]} for k, c in enumerate(names)]


def test_compare_plot_has_the_tables_names_one_emulated_label_and_target_marks(tmp_path,
                                                                                monkeypatch):
    """Issue 36: no internal names (none, thc-noef) in the legend, 'emulated' once on the
    time axis, time to target marked; the demo's pair annotated with the speedup."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from host.training.report import display_name

    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    runs = _fake_runs()
    sums = {r["compressor"]: summarize(r, target=0.45, link_mbps=100.0) for r in runs}
    plot_comparison(runs, str(tmp_path / "p.png"), link_mbps=100.0, target=0.45, summaries=sums)
    (fig,) = figs
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    names = [display_name(r["compressor"]) for r in runs]
    assert names == ["fp32 all-reduce", "fp16 all-reduce", "PowerSGD rank 1", "PowerSGD rank 4",
                     "THC", "THC without error feedback"]
    assert legend[:6] == names and any(t.startswith("reached the target (") for t in legend)
    assert not {"none", "thc-noef", "powersgd-r1"} & set(legend)
    xlabel = fig.axes[2].get_xlabel()
    assert xlabel.count("emulated") == 1
    stars = [ln for ax in (fig.axes[0], fig.axes[2]) for ln in ax.get_lines()
             if ln.get_marker() == "*"]
    assert len(stars) == 2 * len(runs)   # step and time panels, one per run
    time_stars = sorted(ln.get_xdata()[0] for ln in fig.axes[2].get_lines() if ln.get_marker() == "*")
    assert time_stars == sorted(s["time_to_target_s"] for s in sums.values())
    # the demo's pair: the two points and the speedup
    figs.clear()
    pair = _fake_runs(("thc", "none"))
    pair[0]["aggregator"] = "network"
    sums = {r["compressor"]: summarize(r, target=0.45, link_mbps=100.0) for r in pair}
    sums["thc"]["time_to_target_s"] = sums["none"]["time_to_target_s"] / 3
    plot_comparison(pair, str(tmp_path / "q.png"), link_mbps=100.0, target=0.45, summaries=sums,
                    speedup=("thc", "none"))
    (fig,) = figs
    assert [t.get_text() for t in fig.legends[0].get_texts()][:2] == ["THC via switch",
                                                                      "fp32 all-reduce"]
    notes = [c.get_text() for c in fig.axes[2].texts]
    assert any("THC via switch reaches the target" in t and "3.0x sooner" in t for t in notes)


def _train_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.configure(p)
    return p.parse_args(["--task", "digits", *argv])


def test_report_files_are_named_per_run_and_come_in_pairs():
    """Issue 36: a --compare run's JSON is not overwritten by a later single run, and a
    report's PNG is always the same run's."""
    paths = {argv: cli.report_paths(_train_args(*argv)) for argv in [
        ("--compare",), (), ("--aggregator", "network"), ("--compressor", "fp16"),
        ("--compressor", "powersgd", "--powersgd-rank", "1"), ("--no-error-feedback",)]}
    jsons = [str(j) for j, _ in paths.values()]
    assert len(set(jsons)) == len(jsons)
    assert jsons[:3] == ["netco-train-digits-compare.json", "netco-train-digits-thc.json",
                         "netco-train-digits-thc-network.json"]
    for j, png in paths.values():
        assert png == j.with_suffix(".png")
    assert cli.report_paths(_train_args("--out", "r/x.json")) == (Path("r/x.json"), Path("r/x.png"))
    assert cli.report_paths(_train_args("--plot", "y.png")) == (Path("y.json"), Path("y.png"))


def test_network_lines_name_the_switch_and_the_metrics_urls():
    from host.transport.job import NetworkSpec

    net = NetworkSpec((("127.0.0.1", 9000), ("127.0.0.1", 9001)), ("127.0.0.11", "127.0.0.12"),
                      job_id=3, num_slots=8)
    args = _train_args("--aggregator", "network", "--workers", "2", "--metrics-port", "9300")
    lines = cli.network_lines(args, net)
    assert "127.0.0.1:9000 (rank 0), 127.0.0.1:9001 (rank 1)" in lines[0]
    assert "job 3" in lines[0]
    assert lines[1].endswith("http://127.0.0.1:9300/metrics, http://127.0.0.1:9301/metrics")
    lines = cli.network_lines(_train_args("--aggregator", "network", "--workers", "2"), net)
    assert "no metrics served" in lines[1] and "--metrics-port N" in lines[1]
