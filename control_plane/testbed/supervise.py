"""The process that holds a testbed while it is up (started by ``netco testbed up``).

Mininet's nodes live as long as the process that created them, so ``netco testbed up``
starts this supervisor in its own session: it brings the :class:`~control_plane.testbed.net.Testbed`
up, writes the state file (``status: ready`` plus everything ``down`` and ``status`` need:
PIDs, interfaces, P4Runtime addresses, measured impairments), then waits. SIGTERM/SIGINT
(``netco testbed down``) tear it down and the state file records what was removed
(``status: down``). A failed start is recorded as ``status: failed`` with the error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from host.files import write_atomic


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Atomically replace the state file."""
    write_atomic(path, json.dumps(state, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m control_plane.testbed.supervise")
    p.add_argument("--topo", required=True)
    p.add_argument("--state", required=True)
    p.add_argument("--target", default="auto")
    p.add_argument("--tag", default=None)
    p.add_argument("--workdir", default=None)
    p.add_argument("--no-apply", action="store_true")
    p.add_argument("-v", "--verbose", action="count", default=0)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from control_plane.testbed.net import Testbed

    state_path = Path(args.state)
    cmdline = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    base = {"pid": os.getpid(), "cmdline": cmdline, "topology": str(Path(args.topo).resolve()),
            "state_file": str(state_path), "started": time.time()}
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    tb = None
    try:
        tb = Testbed(args.topo, target=args.target, tag=args.tag, workdir=args.workdir,
                     apply=not args.no_apply)
        write_state(state_path, {**base, "status": "starting", "tag": tb.tag,
                                 "root_interfaces": list(tb.plan.root_interfaces),
                                 "workdir": str(tb.workdir)})
        report = tb.up()
    except BaseException as exc:
        write_state(state_path, {**base, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                                 "traceback": traceback.format_exc()[-4000:]})
        return 1
    write_state(state_path, {**base, "status": "ready", "tag": tb.tag, "report": report,
                             "root_interfaces": report["root_interfaces"], "workdir": str(tb.workdir)})
    while not stop.wait(1.0):
        pass
    removed = tb.down()
    write_state(state_path, {**base, "status": "down", "tag": tb.tag, "removed": removed,
                             "root_interfaces": report["root_interfaces"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
