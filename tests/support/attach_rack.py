"""``torchrun --nnodes 2`` on the namespace rack: one node per host namespace, links shaped,
the job applied and handed over with the ``netco`` command line (issue "Attach and operate
from the outside", item 2). Runs inside :func:`control_plane.testbed.isolate.run_isolated`
(root or rootless): the caller's namespace is the rack's switch namespace.

Each node is one torchrun agent (``--nnodes 2 --node_rank r --nproc_per_node 1``) started
with ``nsenter --net`` in host namespace ``h{r+1}``; its rank binds that namespace's address
(member ``r`` of the job, the order of ``members``); torchrun's rendezvous and gloo's traffic
cross the shaped links and the switch namespace's kernel routing, THC goes to the software
target's UDP port on the switch's address of each link.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from control_plane.testbed.nsrack import NamespaceRack
from host.paths import REPO
from host.softswitch.launch import free_tcp_port, start_switch_process, stop_process

EXAMPLE = REPO / "examples" / "train_ddp.py"
NETCO = [sys.executable, "-c", "import sys; from control_plane.cli.main import main; "
                               "sys.exit(main())"]


def _netco(*args: str, env: dict) -> None:
    res = subprocess.run([*NETCO, *args], capture_output=True, text=True, cwd=REPO, env=env,
                         timeout=120)
    if res.returncode:
        raise RuntimeError(f"netco {' '.join(args)}: {res.stdout}{res.stderr}")


def _two_nodes(rack: NamespaceRack, mode: str, steps: int, env: dict,
               out: Path) -> tuple[float, float]:
    """Run the example on both nodes in ``mode`` (``--netco``, ``--thc-gloo``, ``fp32``, or
    ``reversed``: ``--netco`` with the nodes numbered against the members' order, so that each
    rank finds its member by address); seconds from the start to both agents' exit, and the
    training loop's own seconds (rank 0's "N steps in S s")."""
    order = {h.rank: (1 - h.rank if mode == "reversed" else h.rank) for h in rack.hosts}
    master = next(h.ip for h in rack.hosts if order[h.rank] == 0)
    port = str(29400 + int(time.monotonic() * 1000) % 500)
    procs = []
    t0 = time.monotonic()
    for h in sorted(rack.hosts, key=lambda h: order[h.rank]):
        cmd = ["nsenter", f"--net={h.netns_path}", sys.executable, "-m",
               "torch.distributed.run", "--nnodes", "2", "--node_rank", str(order[h.rank]),
               "--nproc_per_node", "1", "--master_addr", master, "--master_port", port,
               str(EXAMPLE), "--steps", str(steps), "--losses", str(out)]
        if mode != "fp32":
            cmd.append("--netco" if mode == "reversed" else mode)
        log = out.with_name(f"{out.stem}.node{h.rank}.log")
        procs.append((subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                       cwd=REPO, env={**env, "GLOO_SOCKET_IFNAME": h.ifname}),
                      log))
    for p, log in procs:
        if p.wait(600) != 0:
            raise RuntimeError(f"node {log.name} failed ({mode}): {log.read_text()[-3000:]}")
    total = time.monotonic() - t0
    found = re.search(r"steps in ([0-9.]+) s", procs[0][1].read_text())
    return total, float(found.group(1)) if found else float("nan")


def two_nodes(link_mbps: float = 100.0, steps: int = 30,
              modes: tuple[str, ...] = ("--netco", "--thc-gloo", "fp32"),
              num_slots: int = 64, coords_per_packet: int = 1024) -> dict:
    """Build a 2-host rack with links of ``link_mbps``, apply the job through the CLI and train
    ``examples/train_ddp.py`` on two torchrun nodes in each of ``modes``: THC through the
    switch (``--netco``; the job's ``num_slots``, the switch's ``coords_per_packet``), THC over
    gloo (``--thc-gloo``), fp32 gloo (``fp32``). Returns each run's wall time and losses, and
    the rack's report (links measured)."""
    with tempfile.TemporaryDirectory(prefix="netco-attach-rack-") as d:
        tmp = Path(d)
        os.chmod(tmp, 0o755)
        env = {**os.environ, "NETCO_STATE_DIR": str(tmp / "state")}
        rack = NamespaceRack(2, link_mbps, switch=False)
        sw = None
        try:
            report = rack.up()
            grpc = free_tcp_port()
            udp = {h.rank + 1: (h.switch_ip, 47000 + h.rank) for h in rack.hosts}
            sw = start_switch_process({n: f"udp:{a}:{p}" for n, (a, p) in udp.items()}, grpc,
                                      tmp / "switch.log",
                                      ["--coords-per-packet", str(coords_per_packet)])
            config = tmp / "net.yaml"
            config.write_text(yaml.safe_dump({
                "switches": [{"name": "s1", "address": f"127.0.0.1:{grpc}",
                              "addr": "10.77.0.254", "target": "softswitch",
                              "coords_per_packet": coords_per_packet,
                              "udp": {n: f"{a}:{p}" for n, (a, p) in udp.items()}}],
                "hosts": [{"name": h.netns, "ip": h.ip, "attach": f"s1:{h.rank + 1}"}
                          for h in rack.hosts],
                "jobs": [{"name": "demo", "id": 1, "members": [h.netns for h in rack.hosts],
                          "num_slots": num_slots}],
            }, sort_keys=False))
            _netco("controller", "apply", str(config), env=env)
            job = tmp / "job.json"
            _netco("controller", "job", str(config), "demo", "--out", str(job), env=env)
            runs = {}
            for mode in modes:
                out = tmp / f"losses{mode}.json"
                secs, train = _two_nodes(rack, mode, steps, {**env, "NETCO_JOB": str(job)}, out)
                runs[mode.lstrip("-")] = {"seconds": round(secs, 2), "train_s": train,
                                          "losses": json.loads(out.read_text())}
        finally:
            stop_process(sw)
            rack.down()
    return {"rack": report, "steps": steps, "runs": runs}
