"""``netco run --config FILE --job NAME -- COMMAND``: apply, write the job file, run the command
with ``NETCO_JOB``, forward signals, pass its exit code on; against a real software switch.

``netco run`` runs as a subprocess (``python -m control_plane.cli.main``: the real command),
its COMMAND is a tiny python script; no torch, no root.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from control_plane.cli.main import main as netco_main
from control_plane.tokens import TokenStore
from host.paths import REPO
from host.softswitch.launch import free_tcp_port
from tests.support.switchproc import Switch

NETCO = [sys.executable, "-m", "control_plane.cli.main"]

#: prints what it was given (the job file's path, its modes, its content) and exits with 7
SHOW_JOB = """\
import json, os, stat, sys
path = os.environ["NETCO_JOB"]
print(json.dumps({"path": path, "args": sys.argv[1:],
                  "file_mode": stat.S_IMODE(os.stat(path).st_mode),
                  "dir_mode": stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode),
                  "job": json.load(open(path))}))
sys.exit(7)
"""

#: waits for SIGTERM or SIGINT, says which in the file named by argv[1], exits with 5
WAIT_TERM = """\
import os, signal, sys, time
def bye(signum, frame):
    open(sys.argv[1], "w").write(f"signal {signum} job {os.environ['NETCO_JOB']}")
    sys.exit(5)
signal.signal(signal.SIGTERM, bye)
signal.signal(signal.SIGINT, bye)
open(sys.argv[1] + ".ready", "w").write("ready")
time.sleep(60)
sys.exit(1)
"""


@pytest.fixture
def switch(tmp_path: Path):
    sw = Switch(tmp_path, 2).start()
    try:
        yield sw.address, sw.ports
    finally:
        sw.stop()


def config(tmp_path: Path, address: str, ports: dict[int, int]) -> Path:
    path = tmp_path / "net.yaml"
    path.write_text(yaml.safe_dump({
        "switches": [{"name": "s1", "address": address, "addr": "10.0.0.254",
                      "target": "softswitch",
                      "udp": {n: f"127.0.0.1:{p}" for n, p in ports.items()}}],
        "hosts": [{"name": "h1", "ip": "127.0.0.11", "attach": "s1:1"},
                  {"name": "h2", "ip": "127.0.0.12", "attach": "s1:2"}],
        "jobs": [{"name": "demo", "id": 1, "members": ["h1", "h2"]}],
    }))
    return path


def netco_run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*NETCO, "run", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_run_gives_the_command_its_job_file(switch, tmp_path: Path) -> None:
    address, ports = switch
    path = config(tmp_path, address, ports)
    p = netco_run("--config", str(path), "--job", "demo", "--", sys.executable, "-c", SHOW_JOB,
                  "--flag", "x")
    assert p.returncode == 7, p.stderr                      # the command's exit code
    err = p.stderr.strip().splitlines()
    assert err == [f"netco run: {path}: 9 updates written to 1 switch(es); job demo (id 1), 2 members"]
    got = json.loads(p.stdout)
    assert got["args"] == ["--flag", "x"]
    assert (got["file_mode"], got["dir_mode"]) == (0o600, 0o700)
    job = got["job"]
    token = TokenStore().get(1, [address])                  # applied and persisted
    assert token and job["token"] == token
    assert (job["name"], job["job_id"], job["num_slots"], job["coords_per_packet"]) == ("demo", 1, 16, 256)
    assert [(m["host"], m["ip"], m["switch_udp"]) for m in job["members"]] == [
        ("h1", "127.0.0.11", ["127.0.0.1", ports[1]]), ("h2", "127.0.0.12", ["127.0.0.1", ports[2]])]
    assert not Path(got["path"]).exists() and not Path(got["path"]).parent.exists()   # removed

    # again, keeping the file: the same token (nothing to write), the file stays
    keep = tmp_path / "demo.job"
    p = netco_run("--config", str(path), "--job", "demo", "--job-file", str(keep), "--",
                  sys.executable, "-c", SHOW_JOB)
    assert p.returncode == 7, p.stderr
    assert "0 updates written" in p.stderr
    got = json.loads(p.stdout)
    assert got["path"] == str(keep) and got["job"]["token"] == token
    assert keep.exists() and (keep.stat().st_mode & 0o777) == 0o600


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_run_forwards_signals_and_cleans_up(switch, tmp_path: Path, sig) -> None:
    address, ports = switch
    path = config(tmp_path, address, ports)
    said = tmp_path / "said"
    # stdin not a terminal: a signal to netco run reached nobody else (no Ctrl-C on a tty)
    proc = subprocess.Popen([*NETCO, "run", "--config", str(path), "--job", "demo", "--",
                             sys.executable, "-c", WAIT_TERM, str(said)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60
        while not Path(f"{said}.ready").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < end, "the command never started"
            time.sleep(0.05)
        os.kill(proc.pid, sig)                              # to netco run, not to the command
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 5, err
    text = said.read_text()
    assert text.startswith(f"signal {int(sig)} job ")
    assert not Path(text.split(" job ", 1)[1]).exists()     # the temporary job file is gone


def test_run_does_not_start_the_command_when_apply_fails(tmp_path: Path) -> None:
    path = config(tmp_path, f"127.0.0.1:{free_tcp_port()}", {1: 47001, 2: 47002})  # no switch
    marker = tmp_path / "ran"
    p = netco_run("--config", str(path), "--job", "demo", "--timeout", "2", "--",
                  sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert p.returncode == 3, p.stderr
    assert not marker.exists()
    lines = p.stderr.strip().splitlines()
    assert lines[0].startswith("netco run: error: s1: ") and "Traceback" not in p.stderr
    assert lines[-1] == f"netco run: {path} not applied on 1 switch(es); the command did not run"


@pytest.mark.parametrize(("argv", "message"), [
    (["--job", "demo"], "COMMAND: give the command to run after --, e.g. netco run --config"),
    (["--job", "demo", "--"], "COMMAND: give the command to run after --"),
    (["--job", "demo", "python", "x.py"], "COMMAND: give the command to run after --"),
    (["--job", "nope", "--", "true"], "--job: unknown job 'nope' in"),
    (["--job", "demo", "--timeout", "0", "--", "true"], "--timeout 0.0: give a number of seconds > 0"),
    (["--job", "demo", "--job-file", "/nonexistent/dir/x", "--", "true"],
     "--job-file /nonexistent/dir/x: no folder /nonexistent/dir"),
])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys, argv, message) -> None:
    path = config(tmp_path, "127.0.0.1:1", {1: 47001, 2: 47002})
    assert netco_main(["run", "--config", str(path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"netco run: error: {message}") and err.count("\n") == 1, err


def test_missing_config_is_one_line(tmp_path: Path, capsys) -> None:
    assert netco_main(["run", "--config", str(tmp_path / "no.yaml"), "--job", "j", "--", "true"]) == 2
    assert capsys.readouterr().err == f"netco run: error: --config {tmp_path / 'no.yaml'}: no such file\n"
