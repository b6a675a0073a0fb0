"""``netco thc roundtrip``, ``netco bench codec`` and ``netco demo`` as a user runs them."""

import json

import numpy as np
import pytest

from control_plane.cli.main import main


@pytest.fixture
def workers(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for w in range(3):
        p = tmp_path / f"w{w}.npy"
        np.save(p, rng.standard_normal((40, 50)).astype(np.float32 if w else np.float16))
        paths.append(str(p))
    return paths


def test_roundtrip_writes_average_and_reports(workers, tmp_path, capsys):
    out = tmp_path / "avg.npy"
    rc = main(["thc", "roundtrip", "--inputs", *workers, "--output", str(out), "--json"])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    avg = np.load(out)
    true = np.mean([np.load(p).astype(np.float64) for p in workers], axis=0)
    err = float(np.sum((avg - true) ** 2) / np.sum(true**2))
    assert avg.shape == (40, 50)
    assert rep["nmse"] == pytest.approx(err, rel=1e-3)
    assert rep["nmse"] < 0.05
    assert rep["lane_bits"] == 8 and rep["contributions"] == 3
    # 2000 elements = chunks of 1024 + 976, padded to 2048 coordinates; 4 bits each + 2 norms
    assert rep["bytes_up_per_worker"] == 2048 // 2 + 2 * 4
    assert rep["bytes_down_per_worker"] == 2048 + 2 * 4


def test_roundtrip_options_change_the_codec(workers, tmp_path, capsys):
    out = tmp_path / "avg.npy"
    main(["thc", "roundtrip", "--inputs", *workers, "--output", str(out), "--json",
          "--bits", "3", "--granularity", "16", "--clip", "1/32", "--seed", "7"])
    rep = json.loads(capsys.readouterr().out)
    assert rep["config"]["table"] == [0, 3, 5, 7, 9, 11, 13, 16]
    assert rep["config"]["seed"] == 7


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "no such file"),
        ("shape", "differs"),
        ("int", "not a float array"),
        ("nan", "NaN or Inf"),
        ("garbage", "not a readable .npy"),
    ],
)
def test_roundtrip_bad_files_exit_2_with_one_line(workers, tmp_path, capsys, setup, message):
    bad = tmp_path / "bad.npy"
    if setup == "shape":
        np.save(bad, np.zeros((3, 3), dtype=np.float32))
    elif setup == "int":
        np.save(bad, np.zeros((40, 50), dtype=np.int32))
    elif setup == "nan":
        a = np.zeros((40, 50), dtype=np.float32)
        a[1, 2] = np.nan
        np.save(bad, a)
    elif setup == "garbage":
        bad.write_bytes(b"not numpy")
    rc = main(["thc", "roundtrip", "--inputs", workers[0], str(bad), "--output",
               str(tmp_path / "o.npy")])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.npy").exists()


@pytest.mark.parametrize("value", [3e38, -1e39, np.inf])
def test_roundtrip_refuses_values_outside_float32_with_one_line(workers, tmp_path, capsys, value):
    bad = tmp_path / "big.npy"
    a = np.zeros((40, 50), dtype=np.float64)
    a[3, 4] = value
    np.save(bad, a)
    out = tmp_path / "o.npy"
    rc = main(["thc", "roundtrip", "--inputs", workers[1], str(bad), "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert str(bad) in err and "float32" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_roundtrip_huge_finite_values_are_one_line(workers, tmp_path, capsys):
    bad = tmp_path / "huge.npy"
    np.save(bad, np.full((40, 50), 1e37, dtype=np.float32))
    rc = main(["thc", "roundtrip", "--inputs", workers[1], str(bad), "--output",
               str(tmp_path / "o.npy")])
    err = capsys.readouterr().err
    assert rc == 2 and "too large" in err and len(err.strip().splitlines()) == 1


def test_roundtrip_unwritable_output_fails_before_the_work(workers, tmp_path, capsys, monkeypatch):
    def never(*a, **k):
        raise AssertionError("the all-reduce ran although the output cannot be written")

    # the command imports the all-reduce when its work starts (issue 36: a fast --help)
    monkeypatch.setattr("host.thc.simulate.allreduce", never)
    for target in ("/nonexistent/dir/x.npy", str(tmp_path)):
        rc = main(["thc", "roundtrip", "--inputs", *workers, "--output", target])
        err = capsys.readouterr().err
        assert rc == 2 and "--output" in err and len(err.strip().splitlines()) == 1


def test_roundtrip_error_needs_no_float64_copies(tmp_path, capsys):
    """The NMSE is accumulated chunk by chunk: numpy's peak stays near the inputs' size."""
    import tracemalloc

    rng = np.random.default_rng(1)
    paths = []
    for w in range(2):
        p = tmp_path / f"big{w}.npy"
        np.save(p, rng.standard_normal(1 << 21).astype(np.float32))
        paths.append(str(p))
    inputs = 2 * (1 << 21) * 4
    small = tmp_path / "small.npy"
    np.save(small, rng.standard_normal(5000).astype(np.float32))
    # warm up: imports and cached tables are not what is measured
    assert main(["thc", "roundtrip", "--inputs", str(small), str(small), "--output",
                 str(tmp_path / "s.npy")]) == 0
    capsys.readouterr()
    tracemalloc.start()
    try:
        rc = main(["thc", "roundtrip", "--inputs", *paths, "--output", str(tmp_path / "o.npy"),
                   "--json"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["nmse"] < 0.05
    # inputs + the decoded average + step-sized temporaries (~2.1x the inputs); the float64
    # copies of the whole inputs for the error took ~6.1x
    assert peak < 3 * inputs, peak


def test_bench_codec_prints_the_schema(capsys):
    rc = main(["bench", "codec", "--sizes", "4096", "--repeat", "1", "--nmse-elements", "8192",
               "--json"])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    row = rep["throughput"][0]
    assert row["elements"] == 4096
    for k in ("encode_s", "decode_s", "aggregate_s", "clone_s"):
        assert row[k] > 0
    for data in ("gaussian", "student_t3", "model_gradient"):
        assert set(rep["nmse"][data]) >= {"thc", "uniform4", "per_worker4", "fp16"}
    g = rep["nmse"]["gaussian"]
    assert g["thc"] < g["uniform4"] < g["per_worker4"]


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("demo", "thc", "bench", "train", "explore", "fielding"):
        assert cmd in out


def test_bench_codec_prints_tables_by_default(capsys):
    rc = main(["bench", "codec", "--sizes", "4096", "--repeat", "1", "--nmse-elements", "8192"])
    assert rc == 0
    out = capsys.readouterr().out
    assert not out.lstrip().startswith("{")
    lines = out.splitlines()
    assert any(line.split()[:2] == ["4,096", "torch"] or line.split()[:2] == ["4,096", "fused"]
               for line in lines), out
    assert "encode ms" in out and "NMSE of one encode/decode" in out
    assert any(line.startswith("gaussian") for line in lines)


@pytest.mark.parametrize(("args", "message"), [
    (["--sizes", "0"], "--sizes 0: must be at least 1"),
    (["--sizes", "4096", "-3"], "--sizes -3: must be at least 1"),
    (["--repeat", "0"], "--repeat 0: must be at least 1"),
    (["--nmse-elements", "0"], "--nmse-elements 0: must be at least 1"),
])
def test_bench_codec_bad_sizes_are_one_line(capsys, args, message):
    assert main(["bench", "codec", *args]) == 2
    err = capsys.readouterr().err
    assert err == f"netco bench: error: {message}\n"


def test_make_inputs_feeds_roundtrip(tmp_path, capsys):
    prefix = str(tmp_path / "g")
    assert main(["thc", "make-inputs", "--workers", "3", "--elements", "5000", "--prefix", prefix]) == 0
    files = [f"{prefix}{r}.npy" for r in range(3)]
    arrays = [np.load(f) for f in files]
    assert [a.shape for a in arrays] == [(5000,)] * 3 and arrays[0].dtype == np.float32
    assert not np.array_equal(arrays[0], arrays[1])
    capsys.readouterr()
    out = str(tmp_path / "avg.npy")
    assert main(["thc", "roundtrip", "--inputs", *files, "--output", out, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nmse"] < 0.05


def test_make_inputs_bad_prefix_is_one_line(tmp_path, capsys):
    bad = str(tmp_path / "missing" / "w")
    assert main(["thc", "make-inputs", "--prefix", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("netco thc: error: --prefix ") and err.count("\n") == 1
