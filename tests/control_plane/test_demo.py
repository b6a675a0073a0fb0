"""``netco demo --quick``: the README's main job, end to end: on the shaped namespace rack
(time measured) and, where namespaces cannot be made, on loopback (time emulated, said so)."""

from __future__ import annotations

import json

import pytest

from control_plane.cli.main import main
from tests.support.rootless import needs_namespaces


def test_demo_quick_falls_back_to_loopback_with_emulated_time(tmp_path, capsys, monkeypatch):
    from control_plane.testbed import isolate

    def unavailable() -> None:
        raise isolate.IsolationError("user namespaces unavailable (unshare: Operation not permitted)")

    monkeypatch.setattr(isolate, "check_available", unavailable)
    out, png = tmp_path / "demo.json", tmp_path / "demo.png"
    rc = main(["demo", "--steps", "6", "--task", "digits", "--workers", "2", "--json", "--out", str(out),
               "--plot", str(png)])
    assert rc == 0
    captured = capsys.readouterr()
    assert "falling back to loopback" in captured.err and "EMULATED" in captured.err
    printed = json.loads(captured.out.strip().splitlines()[-1])
    rep = json.loads(out.read_text())
    assert printed["summary"] == rep["summary"]
    thc, none = rep["summary"]["thc"], rep["summary"]["none"]
    assert rep["runs"][0]["aggregator"] == "network"
    assert rep["runs"][1]["aggregator"] == "torch.distributed"
    # 4-bit indices plus headers and norms up; fp32 is 32 bits per coordinate
    assert thc["bytes_sent_per_step"] < none["bytes_sent_per_step"] / 5
    assert rep["network_stats"]["min_count"] == 2
    sw = rep["switch"][0]
    assert sw["counters"]["ingress.thc_slot.contributions"]["0"] > 0
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert rep["time_basis"] == "emulated" and rep["testbed"] == "loopback"
    assert thc["time_basis"] == none["time_basis"] == "emulated"




@pytest.mark.slow
@needs_namespaces
def test_demo_quick_on_the_shaped_rack_measures_time(tmp_path, capsys):
    out, png = tmp_path / "demo.json", tmp_path / "demo.png"
    rc = main(["demo", "--steps", "6", "--task", "digits", "--workers", "2", "--link-mbps", "100",
               "--json", "--out", str(out), "--plot", str(png)])
    assert rc == 0
    capsys.readouterr()
    rep = json.loads(out.read_text())
    assert rep["testbed"] == "rack" and rep["time_basis"] == "measured"
    assert rep["network"].startswith("namespace rack") and "100 Mbit/s" in rep["network"]
    assert set(rep["rack"]["measured_mbps"]) == {"h1", "h2"}
    for s in rep["summary"].values():
        assert s["time_basis"] == "measured" and s["emulated_s"] is None
    assert rep["runs"][0]["aggregator"] == "network"
    assert rep["network_stats"]["min_count"] == 2
    # every step's bytes crossed the shaped links: the shapers carried at least the THC
    # datagrams and the fp32 all-reduces of both hosts
    thc, none = rep["summary"]["thc"], rep["summary"]["none"]
    for h in ("h1", "h2"):
        assert rep["rack"]["tbf"][h]["up"]["bytes"] >= thc["total_bytes_sent"] + none["total_bytes_sent"]
    assert rep["switch"][0]["counters"]["ingress.thc_slot.contributions"]["0"] > 0


@pytest.mark.slow
@needs_namespaces
def test_demo_as_an_unprivileged_user_measures_time():
    """The README's main job as uid 65534 (as root: ``setpriv``) with an ordinary user's PATH
    (no /usr/sbin): the rack is built in a user namespace and the time is measured."""
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from tests.support.rootless import python_for

    argv = ["-m", "control_plane.cli.main", "demo", "--task", "digits", "--workers", "2",
            "--steps", "2", "--json", "--out", "r.json", "--plot", "r.png"]
    with tempfile.TemporaryDirectory(prefix="netco-demo-test-") as tmp:
        os.chmod(tmp, 0o777)  # the unprivileged run writes its report here
        if os.geteuid() == 0:
            how = python_for(65534)
            if how is None:
                pytest.skip("no Python interpreter with this venv's packages runs as uid 65534")
            cmd, env = how
        else:
            cmd, env = [sys.executable], dict(os.environ)
        env["PATH"] = "/usr/local/bin:/usr/bin:/bin"   # Debian's PATH for ordinary users
        res = subprocess.run([*cmd, *argv], env=env, cwd=tmp, capture_output=True, text=True,
                             timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        assert "Traceback" not in res.stderr and "falling back" not in res.stderr
        rep = json.loads(Path(tmp, "r.json").read_text())
    assert rep["testbed"] == "rack" and rep["time_basis"] == "measured"
    assert rep["rack"]["rootless"] is True
    assert set(rep["rack"]["measured_mbps"]) == {"h1", "h2"}
    assert rep["network_stats"]["min_count"] == 2


def test_demo_switch_without_testbed_is_refused(capsys):
    assert main(["demo", "--switch", "bmv2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("netco demo: error: --switch bmv2 picks the switch of a testbed")
    assert err.count("\n") == 1


def test_demo_bmv2_missing_names_the_demos_flag(capsys):
    import os
    import shutil

    if os.geteuid() != 0:
        pytest.skip("--testbed needs root; the error before it is tested above")
    if shutil.which("simple_switch_grpc"):
        pytest.skip("BMv2 is installed: the demo would run on it")
    assert main(["demo", "--testbed", "mininet", "--switch", "bmv2"]) == 2
    err = capsys.readouterr().err
    assert "simple_switch_grpc is not on PATH" in err and "--switch softswitch" in err
    assert "--target" not in err and err.count("\n") == 1


@pytest.mark.parametrize("flag", ["--out", "--plot"])
def test_demo_refuses_an_unwritable_report_before_training(tmp_path, capsys, monkeypatch, flag):
    """A report the run could not write is refused in one line before minutes of training,
    not as a traceback after them."""
    from control_plane.cli import demo

    def never(*a, **k):
        raise AssertionError("trained although the report cannot be written")

    monkeypatch.setattr(demo, "_train_pair", never)
    bad = tmp_path / "missing" / "r.out"
    args = {"--out": str(tmp_path / "r.json"), "--plot": str(tmp_path / "r.png"), flag: str(bad)}
    assert main(["demo", "--testbed", "loopback", *(x for kv in args.items() for x in kv)]) == 2
    err = capsys.readouterr().err
    assert err == f"netco demo: error: {flag} {bad}: no folder {bad.parent}\n"


def test_demo_time_line_names_the_link_once():
    from control_plane.cli.demo import time_line

    where = "namespace rack (rootless), links shaped to 100 Mbit/s"
    line = time_line("measured", 100.0, where)
    assert line == f"time: measured wall clock, {where}" and line.count("100 Mbit/s") == 1
    line = time_line("emulated", 100.0, "software switch on loopback")
    assert line == ("time: EMULATED: measured compute + bytes at 100 Mbit/s "
                    "(software switch on loopback)")


def test_demo_table_columns_line_up():
    from control_plane.cli.demo import format_columns

    text = format_columns(("", "THC via switch", "fp32 all-reduce"),
                          [("held-out accuracy", "0.9", "0.91"),
                           ("bytes down / worker / step", "1,234", "123,456")])
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1
    assert lines[2].startswith("bytes down / worker / step  ")
    assert lines[1].endswith("0.91") and lines[2].endswith("123,456")


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.parametrize("switch", ["softswitch", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_demo_on_a_mininet_rack_trains_like_loopback(tmp_path, capsys, switch):
    """Through the rack's switch (frames on the hosts' shaped interfaces, workers inside the
    hosts) the THC run follows the loopback run bit for bit: both switches add the same
    integers; the rack's time is measured, loopback's emulated."""
    runs = {}
    for name, extra in (("loopback", ["--testbed", "loopback"]),
                        ("rack", ["--testbed", "mininet", "--switch", switch])):
        out = tmp_path / f"{name}.json"
        rc = main(["demo", "--quick", "--task", "digits", "--workers", "4", "--json", "--out", str(out),
                   "--plot", str(tmp_path / f"{name}.png"), *extra])
        assert rc == 0
        capsys.readouterr()
        runs[name] = json.loads(out.read_text())
    assert runs["rack"]["network"] == f"Mininet rack ({switch}), links shaped to 100 Mbit/s"
    assert runs["rack"]["time_basis"] == "measured" and runs["loopback"]["time_basis"] == "emulated"
    assert set(runs["rack"]["rack"]["measured_mbps"]) == {"h1", "h2", "h3", "h4"}
    loss = {k: [r["loss"] for r in v["runs"][0]["records"]] for k, v in runs.items()}
    assert loss["rack"] == loss["loopback"]
    assert runs["rack"]["network_stats"]["min_count"] == 4


def _fake_run(compressor: str, aggregator: str, nbytes: int) -> dict:
    recs = [{"step": i, "loss": 1.0, "metric": min(1.0, 0.3 * i), "eval_loss": 1.0, "bytes_sent": nbytes,
             "bytes_received": nbytes, "compute_s": 0.01, "comm_s": 0.0, "wall_s": 0.01}
            for i in range(1, 6)]
    return {"compressor": compressor, "aggregator": aggregator, "records": recs, "params": 1000,
            "higher_is_better": True, "metric_name": "accuracy", "task": "digits", "workers": 2,
            "seed": 0, "steps": 5}


def test_demo_plot_marks_both_times_to_target_and_the_speedup(tmp_path, capsys, monkeypatch):
    """Issue 36: the demo's plot marks the two time-to-target points and the speedup, and the
    table says the speedup."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from control_plane.cli import demo

    runs = [_fake_run("thc", "network", 2_000), _fake_run("none", "torch.distributed", 200_000)]
    monkeypatch.setattr(demo, "_train_pair",
                        lambda *a, **k: (runs, [], "software switch on loopback", None))
    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    out, png = tmp_path / "d.json", tmp_path / "d.png"
    assert main(["demo", "--testbed", "loopback", "--task", "digits", "--steps", "5",
                 "--out", str(out), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    rep = json.loads(out.read_text())
    tt = rep["time_to_target_s"]
    assert tt["thc"] < tt["none"]
    (fig,) = figs
    ax = fig.axes[2]
    stars = sorted(ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_marker() == "*")
    assert stars == pytest.approx(sorted(tt.values()))
    notes = " ".join(t.get_text() for t in ax.texts)
    assert f"{rep['speedup_to_target']:.1f}x sooner" in notes and "THC via switch" in notes
    assert ax.get_xlabel().count("emulated") == 1
    row = next(line for line in text.splitlines() if line.startswith("speedup to"))
    assert f"{rep['speedup_to_target']:.1f}x" in row
