"""The README's commands, run as a newcomer would copy them (those that need no root or BMv2).

Every line of the README's ``bash`` blocks must be known to :data:`PLAN`: run as written,
run shortened (fewer steps or rounds, named here), or not run, with the reason. A command
added to the README without an entry here fails :func:`test_every_readme_command_is_planned`.
The commands run in a temporary folder (files they write stay out of the checkout), with
``.venv/bin/netco`` as this interpreter's ``netco``, and the fixed ports of the README's
software switch (9559, 47001, 47002, 9100) moved to free ones so that parallel test runs
do not collide; ``examples/net.yaml`` is copied with the moved P4Runtime port.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
NETCO = [sys.executable, "-m", "control_plane.cli.main"]

#: command prefix -> ("run", extra args) | ("skip", reason). The longest matching prefix wins.
PLAN: dict[str, tuple[str, object]] = {
    "./dev.sh demo": ("skip", "dev.sh is what runs this suite; tests/control_plane/test_demo.py "
                              "runs netco demo"),
    "./dev.sh test": ("skip", "dev.sh is what runs this suite"),
    "./dev.sh p4 --dry-run": ("run", []),
    "./dev.sh p4": ("skip", "builds PI, BMv2 and p4c (about an hour, as root); "
                            "tests/test_p4_toolchain.py checks its flags, --src and plan"),
    "netco thc make-inputs": ("run", []),
    "netco thc roundtrip": ("run", []),
    "netco thc table": ("run", []),
    "netco bench codec": ("run", []),
    "netco switch": ("run", []),
    "netco controller apply": ("run", []),
    "netco controller status": ("run", []),
    "netco run": ("run", []),
    "curl": ("run", []),
    "switch_pid=$!": ("run", []),
    "kill $switch_pid": ("run", []),
    "make -C p4": ("run", []),
    "netco train --task digits --workers 2 --aggregator network": ("run", ["--steps", "4"]),
    "netco train --task digits --workers 4 --compare": ("run", ["--steps", "2", "--eval-every", "2"]),
    "sudo": ("skip", "live capture needs root and tshark; tests/host/protocol/test_capture.py "
                     "decodes a real all-reduce"),
    "netco explore search": ("run", []),
    "netco fielding run": ("run", ["--rounds", "4", "--clients", "8", "--no-progress"]),
}

#: The README's fixed ports (software switch, metrics) and what kind of socket frees one.
PORTS = {9559: socket.SOCK_STREAM, 47001: socket.SOCK_DGRAM, 47002: socket.SOCK_DGRAM,
         9100: socket.SOCK_STREAM, 9200: socket.SOCK_STREAM}


def readme_commands() -> list[str]:
    """Every command line of the README's bash blocks, comments removed."""
    lines, inside = [], False
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```bash"
            continue
        if inside and line.strip():
            lines.append(" ".join(shlex.split(line, comments=True)) if "'" not in line
                         else line.split("  #")[0].strip())
    return lines


def plan_of(cmd: str) -> tuple[str, tuple[str, object]]:
    norm = cmd.replace(".venv/bin/", "")
    keys = [k for k in PLAN if norm.startswith(k)]
    if not keys:
        raise KeyError(cmd)
    key = max(keys, key=len)
    return key, PLAN[key]


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_every_readme_command_is_planned() -> None:
    cmds = readme_commands()
    assert len(cmds) >= 12
    unknown = []
    for c in cmds:
        try:
            plan_of(c)
        except KeyError:
            unknown.append(c)
    assert not unknown, f"README commands this test does not know: {unknown}"


def test_readme_python_block_runs() -> None:
    (block,) = python_blocks()
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    res = scope["res"]
    assert res.average.shape == (10_000,) and res.lane_bits == 8


def _free(kind: int, span: int = 1) -> int:
    """A port P with P..P+span-1 free (training ranks serve metrics on N + rank)."""
    while True:
        with socket.socket(socket.AF_INET, kind) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + span - 1 > 65535:
            continue
        try:
            for q in range(port + 1, port + span):
                with socket.socket(socket.AF_INET, kind) as t:
                    t.bind(("127.0.0.1", q))
        except OSError:
            continue
        return port


class Runner:
    """Runs README lines in ``work``: foreground ones to completion, ``&`` ones in the background."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.ports = {p: _free(kind, span=4) for p, kind in PORTS.items()}
        self.background: list[subprocess.Popen] = []
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100"}
        net = (REPO / "examples" / "net.yaml").read_text()
        (work / "examples").mkdir()
        (work / "examples" / "net.yaml").write_text(self.moved(net))

    def moved(self, text: str) -> str:
        for old, new in self.ports.items():
            text = re.sub(rf"\b{old}\b", str(new), text)
        return text

    def argv(self, cmd: str, extra: list[str]) -> list[str]:
        args = shlex.split(self.moved(cmd))
        if args[0] == ".venv/bin/netco":
            args = NETCO + args[1:]
            if args[len(NETCO)] == "switch" and "--grpc" not in args:
                args += ["--grpc", f"127.0.0.1:{self.ports[9559]}"]
        for i, a in enumerate(args):
            if "/" in a and not a.startswith("-") and not (self.work / a).exists() \
                    and (REPO / a).exists():
                args[i] = str(REPO / a)
        return args + extra

    def run(self, cmd: str, extra: list[str]) -> str:
        background = cmd.endswith("&")
        cmd = cmd.rstrip("&").strip()
        if cmd == "switch_pid=$!":   # the shell keeps the background switch's id
            assert self.background, "switch_pid=$! with nothing started in the background"
            return ""
        if cmd == "kill $switch_pid":
            proc = self.background.pop(0)
            os.kill(proc.pid, signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
            assert proc.returncode == 0, out
            return out
        if cmd.startswith("curl"):
            url = self.moved(re.search(r"http://\S+", cmd).group(0))
            pattern = re.search(r"grep '([^']+)'", cmd).group(1)
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            assert any(re.search(pattern, line) for line in text.splitlines()), text
            return text
        if cmd.startswith("make"):
            args, cwd = shlex.split(cmd), REPO
            self.env["PATH"] = f"{Path(sys.executable).parent}:{self.env['PATH']}"
        else:
            args, cwd = self.argv(cmd, extra), self.work
        if background:
            proc = subprocess.Popen(args, cwd=cwd, env=self.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            self.background.append(proc)
            self.wait_for_port(proc, self.ports[9559])
            return ""
        proc = subprocess.run(args, cwd=cwd, env=self.env, capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.stdout

    @staticmethod
    def wait_for_port(proc: subprocess.Popen, port: int) -> None:
        end = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            assert time.monotonic() < end, "the README's switch did not open its P4Runtime port"
            time.sleep(0.1)

    def stop(self) -> None:
        for proc in self.background:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(5)


def test_readme_commands_run_as_written(tmp_path: Path) -> None:
    """Each README command that needs no root or BMv2 exits 0 without a traceback."""
    runner = Runner(tmp_path)
    outputs: dict[str, str] = {}
    skipped = []
    try:
        for cmd in readme_commands():
            _, (what, arg) = plan_of(cmd)
            if what == "skip":
                skipped.append(cmd)
                continue
            if cmd.startswith("make") and shutil.which("make") is None:
                skipped.append(cmd)
                continue
            outputs[cmd] = runner.run(cmd, list(arg))
    finally:
        runner.stop()
    ran = " ".join(outputs)
    # The worker files make-inputs wrote fed roundtrip; the switch was configured and read.
    assert (tmp_path / "avg.npy").exists()
    assert "controller apply" in ran and "controller status" in ran
    status = next(v for k, v in outputs.items() if k.endswith("status examples/net.yaml"))
    assert "s1" in status and "yes" in status  # reachable
    watch = next(v for k, v in outputs.items() if "--watch" in k)
    assert watch.count("netco switch counters at") == 3, watch
    assert any(line.split()[:3] == ["demo", "1", "s1"] for line in watch.splitlines()), watch
    assert all(c.startswith(("./dev.sh", "sudo", "make")) for c in skipped), skipped
