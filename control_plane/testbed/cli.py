"""``netco testbed``: Mininet testbeds from the controller's topology file.

Examples::

    netco testbed up --topo mininet/rack.yaml              # build, verify, start, apply; detach
    netco testbed status --topo mininet/rack.yaml --json   # processes, ports, impairments
    netco testbed down --topo mininet/rack.yaml            # remove exactly what up created
    netco testbed up --topo mininet/two_buildings.yaml --target softswitch --foreground

``up`` starts a supervisor process that holds the network (Mininet nodes live as long as
their creator) and records it in a state file (default ``/run/netco-testbed/<topo>.json``);
``down`` asks that supervisor to tear down and then removes anything it recorded that is
still there (if the supervisor died). Needs root. Exit codes: 0 ok, 1 the testbed failed (or
``status``: not up / unhealthy), 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from control_plane.testbed.impair.node import FORWARDER_MODULE
from host import paths
from host.errors import UsageError

STATE_DIR = Path(os.environ.get("NETCO_TESTBED_STATE_DIR", "/run/netco-testbed"))
SUPERVISOR = "control_plane.testbed.supervise"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``up``, ``down`` and ``status``."""
    parser.description = __doc__.split("\n\n")[0]
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--topo", required=True, metavar="FILE",
                       help="topology file (the controller's desired-state file, e.g. mininet/rack.yaml)")
        p.add_argument("--state", default=None, metavar="FILE",
                       help="state file (default: $NETCO_TESTBED_STATE_DIR or /run/netco-testbed, "
                            "named after the topology)")
        p.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser("up", help="build the network, verify impairments, start switches, apply",
                       description="Build the topology's Mininet network (root), check the links' "
                       "measured impairments, start the switches (BMv2 or the software target), "
                       "apply the file with the controller, and detach a supervisor that holds it.")
    common(p)
    p.add_argument("--target", choices=("auto", "softswitch", "bmv2"), default="auto",
                   help="switch program (default auto: BMv2 when simple_switch_grpc and the built "
                        "program are present, else the software target)")
    p.add_argument("--tag", default=None, help="prefix of root-namespace interface names (2-6 chars)")
    p.add_argument("--workdir", default=None, help="logs and statistics (default: a temporary folder)")
    p.add_argument("--no-apply", action="store_true", help="do not apply the file with the controller")
    p.add_argument("--foreground", action="store_true", help="stay in the foreground until Ctrl-C")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the testbed")
    p.set_defaults(func=run_up)

    p = sub.add_parser("down", help="tear down what up created",
                       description="Ask the testbed's supervisor to tear the network down, then "
                       "remove anything the state file records that is still there.")
    common(p)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the supervisor")
    p.set_defaults(func=run_down)

    p = sub.add_parser("status", help="is it up: processes, P4Runtime ports, impairments",
                       description="Report whether the testbed is up: its processes, P4Runtime "
                       "ports and impairments (exit code 1 when not up or unhealthy).")
    common(p)
    p.set_defaults(func=run_status)


# ---------------------------------------------------------------------------------------------


def state_path(args: argparse.Namespace) -> Path:
    if args.state:
        return Path(args.state)
    return STATE_DIR / f"{Path(args.topo).stem}.json"


def _topo(args: argparse.Namespace) -> Path:
    """The topology file, validated as the controller's file and as a testbed layout."""
    topo = Path(args.topo)
    if not topo.exists():
        raise UsageError(f"--topo {topo}: no such file")
    from control_plane.config import ConfigError, load_config
    from control_plane.testbed.plan import PlanError, make_plan
    from control_plane.testbed.targets import TestbedError, choose_target

    try:
        cfg = load_config(topo)
        make_plan(cfg, getattr(args, "tag", None) or "nt000")
        if hasattr(args, "target"):
            choose_target(args.target, cfg.controller.bmv2_json)
    except ConfigError as exc:
        raise UsageError("\n".join(f"--topo {line}" for line in exc.lines())) from None
    except (PlanError, TestbedError) as exc:
        raise UsageError(f"--topo {topo}: {exc}") from None
    return topo


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int | None, must_contain: str = "") -> bool:
    """Process ``pid`` exists (and its command line contains ``must_contain``)."""
    if not pid:
        return False
    cmd = _cmdline(pid)
    return bool(cmd) and must_contain in cmd


def _supervisor_alive(state: dict[str, Any], path: Path) -> bool:
    """The process holding the testbed (supervisor, or ``up --foreground``) still runs."""
    cmd = _cmdline(state.get("pid") or 0)
    return bool(cmd) and cmd == state.get("cmdline") and "testbed" in cmd  # not a reused PID


def _emit(args: argparse.Namespace, obj: dict[str, Any], text: str) -> None:
    print(json.dumps(obj, indent=1, default=str) if args.json else text)


def _summary(report: dict[str, Any]) -> str:
    lines = [f"testbed {report['tag']} up in {report['up_s']} s: {len(report['switches'])} switches "
             f"({report['target']}: {report['target_reason']}), {len(report['hosts'])} hosts"]
    for name, s in report["switches"].items():
        lines.append(f"  switch {name}: P4Runtime {s['grpc']} device {s['device_id']} pid {s['pid']}")
    for ln in report["links"]:
        if "asked" in ln:
            m = ln.get("measured", {}).get("a->b", {})
            got = ", ".join(f"{k} {v}" for k, v in m.items()
                            if k in ("loss_pct", "delay_ms_median", "rate_mbps", "dup_pct", "reorder_pct"))
            lines.append(f"  link {ln['link']}: {ln['asked']} via {ln['mode']} node; measured {got}")
    for c in report.get("controller", []):
        lines.append(f"  controller: {c['switch']} {c['writes']} writes, in sync {c['in_sync']}")
    return "\n".join(lines)


def run_up(args: argparse.Namespace) -> int:
    topo = _topo(args)
    if os.geteuid() != 0:
        raise UsageError("a Mininet testbed needs root")
    path = state_path(args)
    old = _read(path)
    if old is not None and _supervisor_alive(old, path):
        raise UsageError(f"{topo} is already up (supervisor pid {old['pid']}); run: netco testbed down "
                         f"--topo {topo}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if args.foreground:
        return _foreground(args, topo)
    cmd = [sys.executable, "-m", SUPERVISOR, "--topo", str(topo), "--state", str(path),
           "--target", args.target]
    for flag, val in (("--tag", args.tag), ("--workdir", args.workdir)):
        if val:
            cmd += [flag, val]
    if args.no_apply:
        cmd.append("--no-apply")
    if getattr(args, "verbose", 0):
        cmd.append("-v")
    log_path = path.with_suffix(".log")
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=paths.REPO, start_new_session=True)
    end = time.monotonic() + args.timeout
    while True:
        st = _read(path)
        if st and st.get("status") in ("ready", "failed"):
            break
        if proc.poll() is not None:
            st = _read(path) or {"status": "failed", "error": f"supervisor exited {proc.returncode}: "
                                                              f"{log_path.read_text()[-1500:]}"}
            break
        if time.monotonic() > end:
            os.kill(proc.pid, signal.SIGTERM)
            st = {"status": "failed", "error": f"not up after {args.timeout:g} s (log {log_path})"}
            break
        time.sleep(0.2)
    if st["status"] != "ready":
        _emit(args, st, f"netco testbed up: failed: {st.get('error')}")
        return 1
    _emit(args, st, _summary(st["report"]) + f"\n  state {path}; stop with: netco testbed down "
                                              f"--topo {topo}")
    return 0


def _foreground(args: argparse.Namespace, topo: Path) -> int:
    from control_plane.testbed.net import Testbed
    from control_plane.testbed.supervise import write_state

    tb = Testbed(topo, target=args.target, tag=args.tag, workdir=args.workdir, apply=not args.no_apply)
    path = state_path(args)
    try:
        report = tb.up()
    except Exception as exc:
        print(f"netco testbed up: failed: {exc}", file=sys.stderr)
        return 1
    write_state(path, {"pid": os.getpid(), "cmdline": _cmdline(os.getpid()), "status": "ready",
                       "tag": tb.tag, "report": report,
                       "root_interfaces": report["root_interfaces"], "workdir": str(tb.workdir),
                       "foreground": True})
    _emit(args, report, _summary(report) + "\n  Ctrl-C tears it down")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # SIGINT too: a shell's "&" ignores it
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            pass
    finally:
        removed = tb.down()
        write_state(path, {"pid": os.getpid(), "status": "down", "tag": tb.tag, "removed": removed,
                           "root_interfaces": report["root_interfaces"], "foreground": True})
        print(f"testbed {tb.tag} down: {json.dumps(removed)}", file=sys.stderr)
    return 0


def _cleanup_leftovers(state: dict[str, Any]) -> dict[str, list]:
    """After the supervisor is gone: stop recorded processes that still run (checked by command
    line) and delete recorded root-namespace interfaces that still exist."""
    out: dict[str, list] = {"killed": [], "deleted": []}
    report = state.get("report") or {}
    pids: list[tuple[int, str]] = []
    for s in report.get("switches", {}).values():
        pids.append((s["pid"], s["grpc"]))
    for ln in report.get("links", []):
        if ln.get("forwarder_pid"):
            pids.append((ln["forwarder_pid"], FORWARDER_MODULE))
    for pid, marker in pids:
        if _alive(pid, marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                out["killed"].append(pid)
    for ifname in state.get("root_interfaces", []):
        if Path(f"/sys/class/net/{ifname}").exists():
            subprocess.run(["ip", "link", "del", ifname], capture_output=True, check=False)
            out["deleted"].append(ifname)
    return out


def run_down(args: argparse.Namespace) -> int:
    path = state_path(args)
    st = _read(path)
    if st is None:
        raise UsageError(f"no testbed state at {path}: nothing is up for {args.topo} "
                         "(or give --state FILE)")
    result: dict[str, Any] = {"tag": st.get("tag"), "state_file": str(path)}
    if _supervisor_alive(st, path):
        os.kill(st["pid"], signal.SIGTERM)
        end = time.monotonic() + args.timeout
        while _supervisor_alive(st, path) and time.monotonic() < end:
            time.sleep(0.2)
        if _supervisor_alive(st, path):
            raise UsageError(f"process {st['pid']} still running after {args.timeout:g} s")
        after = _read(path) or {}
        result["removed"] = after.get("removed")
    else:
        result["note"] = f"supervisor not running (status was {st.get('status')})"
    result["leftovers"] = _cleanup_leftovers(st)
    path.unlink(missing_ok=True)
    text = f"testbed {st.get('tag')} down"
    if result.get("removed"):
        r = result["removed"]
        text += f": stopped {len(r['processes'])} processes, {len(r['nodes'])} nodes"
    if any(result["leftovers"].values()):
        text += f"; cleaned leftovers {result['leftovers']}"
    _emit(args, result, text)
    return 0


def run_status(args: argparse.Namespace) -> int:
    path = state_path(args)
    st = _read(path)
    if st is None:
        _emit(args, {"up": False, "state_file": str(path)}, f"not up ({path} missing)")
        return 1
    report = st.get("report") or {}
    sup = _supervisor_alive(st, path)
    out: dict[str, Any] = {"up": bool(sup) and st.get("status") == "ready", "status": st.get("status"),
                           "tag": st.get("tag"), "supervisor_pid": st.get("pid"),
                           "target": report.get("target"), "error": st.get("error")}
    import socket

    sw = {}
    for name, s in report.get("switches", {}).items():
        host, _, port = s["grpc"].rpartition(":")
        with socket.socket() as so:
            open_ = so.connect_ex((host, int(port))) == 0
        sw[name] = {"pid": s["pid"], "alive": _alive(s["pid"], s["grpc"]), "grpc": s["grpc"],
                    "grpc_open": open_}
    out["switches"] = sw
    out["hosts"] = {n: {"pid": h["pid"], "alive": _alive(h["pid"])}
                    for n, h in report.get("hosts", {}).items()}
    links = []
    for ln in report.get("links", []):
        if "asked" not in ln:
            continue
        d = {"link": ln["link"], "asked": ln["asked"], "mode": ln["mode"], "measured": ln.get("measured")}
        if ln.get("forwarder_pid"):
            d["forwarder_alive"] = _alive(ln["forwarder_pid"], FORWARDER_MODULE)
            stats = _read(Path(ln["forwarder_stats"]))
            if stats:
                d["forwarder"] = {k: stats[k] for k in ("a->b", "b->a")}
        links.append(d)
    out["links"] = links
    healthy = out["up"] and all(v["alive"] and v["grpc_open"] for v in sw.values()) and all(
        v["alive"] for v in out["hosts"].values()) and all(d.get("forwarder_alive", True) for d in links)
    out["healthy"] = bool(healthy)
    lines = [f"testbed {out['tag']}: {st.get('status')}" + ("" if sup else " (supervisor not running)")
             + f", {'healthy' if healthy else 'NOT healthy'}"]
    if out["error"]:
        lines.append(f"  error: {out['error']}")
    for n, v in sw.items():
        lines.append(f"  switch {n}: pid {v['pid']} {'alive' if v['alive'] else 'DEAD'}, P4Runtime "
                     f"{v['grpc']} {'open' if v['grpc_open'] else 'CLOSED'}")
    dead = [n for n, v in out["hosts"].items() if not v["alive"]]
    lines.append(f"  hosts: {len(out['hosts'])}" + (f", dead: {', '.join(dead)}" if dead else " alive"))
    for d in links:
        lines.append(f"  link {d['link']}: {d['asked']} via {d['mode']}"
                     + (f", forwarder {'alive' if d.get('forwarder_alive') else 'DEAD'}"
                        if "forwarder_alive" in d else ""))
    _emit(args, out, "\n".join(lines))
    return 0 if healthy else 1
