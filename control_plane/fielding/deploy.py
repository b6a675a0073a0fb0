"""FIELDING on Flower's deployment engine: SuperLink and SuperNodes as separate processes.

Two halves:

* the Flower app (:data:`server_app`, :data:`client_app`), configured by the run config of
  ``examples/fielding_flower/pyproject.toml`` (``scenario``, ``num-server-rounds``,
  ``num-clients``, ``seed``, ``network-config``, ``out``) and the node config of each SuperNode
  (``partition-id``, ``num-partitions``; in-network mode also ``switch-udp`` and ``bind-ip``);
* :class:`Deployment`, which starts everything with Flower's own CLI -- ``flower-superlink
  --insecure``, one ``flower-supernode --insecure --superlink ... --node-config ...`` per
  client, then ``flwr run <app dir> <connection>`` -- and, for in-network aggregation, one
  software switch (``python -m host.softswitch``) whose per-cluster THC jobs the ServerApp's
  controller installs (:mod:`control_plane.fielding.flower_network`). Every process it starts
  is its own process group, ended by that id when the deployment stops.

``netco fielding deploy`` (:func:`deploy`) runs one deployment and prints its result.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from control_plane.fielding.flower import (
    FieldingStrategy,
    _scenario_app,
    _summary,
    make_client_app,
)

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
#: The Flower app directory ``flwr run`` submits.
APP_DIR = REPO / "examples" / "fielding_flower"
#: Classes of the data set the app uses (scikit-learn's digits).
N_CLASSES = 10


# --------------------------------------------------------------------------- the Flower app
@functools.lru_cache(maxsize=4)
def _scenario(kind: str, n_clients: int, rounds: int, seed: int):
    from control_plane.fielding.scenarios import make_scenario

    return make_scenario(kind, "digits", n_clients, rounds, seed)


def _run_scenario(context: Context):
    rc = context.run_config
    return _scenario(str(rc["scenario"]), int(rc["num-clients"]), int(rc["num-server-rounds"]),
                     int(rc["seed"]))


def _data(context: Context, rnd: int):
    d = _run_scenario(context).data(int(context.node_config["partition-id"]), rnd)
    return d.X_train, d.y_train, d.X_test, d.y_test


client_app = make_client_app(_data, N_CLASSES)
server_app = ServerApp()


def _jsonable(value: Any) -> Any:
    import numpy as np

    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def network_report(network) -> list[dict]:
    """Per round of an in-network run: P4Runtime writes, touched jobs, and per cluster the
    members (partition ids), the model sent, the job's sum, the weight and the new model."""
    return [{"round": r.round, "writes": r.update.writes if r.update else 0,
             "touched_jobs": r.update.touched_jobs if r.update else [],
             "clusters": _jsonable(r.clusters)} for r in network.rounds]


@server_app.main()
def _server_main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    out_path = str(rc.get("out", ""))
    try:
        result = _serve(grid, context)
    except Exception as exc:  # the driver waits for the file: say why there is no result
        log.exception("FIELDING ServerApp failed")
        result = {"error": f"{type(exc).__name__}: {exc}"}
    if out_path:
        tmp = Path(out_path + ".part")
        tmp.write_text(json.dumps(result))
        tmp.replace(out_path)


def _serve(grid: Grid, context: Context) -> dict:
    from control_plane.fielding.flower_network import InNetworkAggregation

    rc = context.run_config
    n, rounds = int(rc["num-clients"]), int(rc["num-server-rounds"])
    sc, _, init = _scenario_app(str(rc["scenario"]), n, rounds, int(rc["seed"]))
    network = None
    if cfg_path := str(rc.get("network-config", "")):
        network = InNetworkAggregation(json.loads(Path(cfg_path).read_text()))
    strategy = FieldingStrategy(min_available_nodes=n, network=network, query_timeout=300)
    result = strategy.start(grid=grid, initial_arrays=init, num_rounds=rounds)
    out = _summary(result, sc, strategy, rounds)
    out |= {"engine": "flwr deployment engine (SuperLink + SuperNodes)",
            "in_network": network is not None}
    if network is not None:
        out["network"] = network_report(network)
    return _jsonable(out)


# --------------------------------------------------------------------------- the processes
def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml_value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)


def _node_config(cfg: dict) -> str:
    return " ".join(f"{k}={_toml_value(v)}" for k, v in cfg.items())


class DeploymentError(RuntimeError):
    """A process of the deployment failed (the message names it and its log)."""


class Deployment:
    """SuperLink, SuperNodes (and a software switch) as separate processes; see module doc.

    Parameters
    ----------
    workdir : Path
        Logs, ``FLWR_HOME``, the controller file and the result go here.
    n_clients : int
        SuperNodes (partition ids ``0..n-1``).
    in_network : bool
        Start a software switch and aggregate each cluster's updates in it.
    app_dir : Path
        The Flower app ``flwr run`` submits.
    target : object, optional
        A switch the caller runs (e.g. BMv2 on veth links), with ``base`` (controller file
        without jobs, hosts named ``p<partition id>``) and ``node_configs`` (one per partition,
        :data:`~control_plane.fielding.flower_network.RAW_KEYS` included): in-network
        aggregation through it instead of a software switch started here.
    """

    def __init__(self, workdir: Path, n_clients: int, in_network: bool = False,
                 app_dir: Path = APP_DIR, target: Any = None) -> None:
        if not 2 <= n_clients <= 200:
            raise ValueError(f"n_clients={n_clients}: need 2..200 SuperNodes")
        self.workdir = Path(workdir)
        self.n_clients = n_clients
        self.in_network = in_network or target is not None
        self.target = target
        self.app_dir = Path(app_dir)
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []
        self.home = self.workdir / "flwr-home"
        self.port = 0
        self.network_config: Path | None = None
        bindir = str(Path(sys.executable).parent)
        self.env = {**os.environ, "FLWR_HOME": str(self.home),
                    "PATH": os.pathsep.join([bindir, os.environ.get("PATH", "")]),
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                                os.environ.get("PYTHONPATH")]))}

    # ------------------------------------------------------------------- processes
    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        logf = self.workdir / f"{name}.log"
        with open(logf, "a") as f:
            proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, cwd=self.workdir,
                                    env=self.env, start_new_session=True)
        self.procs.append((name, proc, logf))
        return proc

    def _wait_port(self, name: str, proc: subprocess.Popen, port: int, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise DeploymentError(f"{name} exited ({proc.returncode}):\n"
                                      + self._tail(self.workdir / f"{name}.log"))
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise DeploymentError(f"{name}: port {port} not open after {timeout:.0f} s:\n"
                              + self._tail(self.workdir / f"{name}.log"))

    @staticmethod
    def _tail(path: Path, n: int = 15) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def start(self, timeout: float = 60.0) -> Deployment:
        """Start the switch (in-network), the SuperLink and the SuperNodes; wait until up."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(exist_ok=True)
        nodes = [{"partition-id": p, "num-partitions": self.n_clients}
                 for p in range(self.n_clients)]
        if self.target is not None:
            nodes = list(self.target.node_configs)
            self._write_network(self.target.base)
        elif self.in_network:
            nodes = self._start_switch(timeout)
        self.port = _free_tcp_port()
        (self.home / "config.toml").write_text(
            '[superlink]\ndefault = "netco"\n\n[superlink.netco]\n'
            f'address = "127.0.0.1:{self.port}"\ninsecure = true\n')
        link = self._spawn("superlink", [
            "flower-superlink", "--insecure", "--port", str(self.port),
            "--disable-runtime-dependency-installation"])
        self._wait_port("superlink", link, self.port, timeout)
        for p, cfg in enumerate(nodes):
            self._spawn(f"supernode-{p}", [
                "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                "--port", str(_free_tcp_port()), "--node-config", _node_config(cfg)])
        return self

    def _start_switch(self, timeout: float) -> list[dict]:
        from control_plane.fielding.flower_network import software_target
        from host.softswitch.launch import free_port, switch_command

        grpc = free_port(socket.SOCK_STREAM)
        target = software_target(self.n_clients, grpc, [free_port() for _ in
                                                        range(self.n_clients)])
        sw = self._spawn("softswitch", switch_command(target.port_specs, grpc))
        self._wait_port("softswitch", sw, grpc, timeout)
        self._write_network(target.base)
        return target.node_configs

    def _write_network(self, base: dict) -> None:
        self.network_config = self.workdir / "network.json"
        self.network_config.write_text(json.dumps(base, indent=1))

    def stop(self) -> None:
        """End every process this deployment started (its process group), newest first."""
        for _, proc, _ in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for _, proc, _ in reversed(self.procs):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.procs.clear()

    def __enter__(self) -> Deployment:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------- a run
    def run(self, rounds: int = 6, scenario: str = "concept", seed: int = 0,
            timeout: float = 600.0) -> dict:
        """``flwr run`` the app on this deployment; wait for and return the ServerApp's result."""
        out = self.workdir / f"result-{time.time_ns()}.json"
        overrides = {"scenario": scenario, "num-server-rounds": rounds,
                     "num-clients": self.n_clients, "seed": seed, "out": str(out),
                     "network-config": str(self.network_config or "")}
        cmd = ["flwr", "run", str(self.app_dir), "netco", "--run-config",
               " ".join(f"{k}={_toml_value(v)}" for k, v in overrides.items())]
        res = subprocess.run(cmd, env=self.env, cwd=self.workdir, capture_output=True, text=True,
                             timeout=120)
        (self.workdir / "flwr-run.log").write_text(res.stdout + res.stderr)
        if res.returncode != 0:
            raise DeploymentError(f"flwr run failed ({res.returncode}):\n{res.stdout}{res.stderr}")
        end = time.monotonic() + timeout
        while not out.exists():
            for name, proc, logf in self.procs:
                if proc.poll() is not None:
                    raise DeploymentError(f"{name} exited ({proc.returncode}) during the run:\n"
                                          + self._tail(logf))
            if time.monotonic() > end:
                raise DeploymentError(f"no result after {timeout:.0f} s; SuperLink log:\n"
                                      + self._tail(self.workdir / "superlink.log", 30))
            time.sleep(0.5)
        result = json.loads(out.read_text())
        if "error" in result:
            raise DeploymentError(f"the ServerApp failed: {result['error']} (log: "
                                  f"{self.workdir / 'superlink.log'})")
        return result


def deploy(n_clients: int = 8, rounds: int = 6, scenario: str = "concept", seed: int = 0,
           in_network: bool = False, workdir: Path | None = None,
           timeout: float = 600.0) -> dict:
    """Start a deployment, run FIELDING once, stop it; the ServerApp's result."""
    with tempfile.TemporaryDirectory(prefix="netco-flwr-") as tmp:
        wd = Path(workdir) if workdir is not None else Path(tmp)
        with Deployment(wd, n_clients, in_network=in_network) as dep:
            return dep.run(rounds, scenario, seed, timeout)
