"""``netco run``: apply the desired-state file, write the job's job file, run a command with it.

Examples::

    netco run --config net.yaml --job resnet -- python train.py --epochs 3
    netco run --config net.yaml --job resnet --job-file resnet.job -- ./worker.sh

What it does, in order:

1. applies the file as ``netco controller apply FILE`` does (the tokens the switches hold, else
   the persisted ones, else fresh draws; the installed tokens persisted in the state directory),
   with its one-line summary on stderr; if a switch fails, the error lines go to stderr and it
   exits with 3 without running the command;
2. writes the job's job file (:mod:`host.transport.jobfile`, mode 0600): to ``--job-file``, or
   into a fresh temporary directory (mode 0700) removed when the command ends;
3. runs the command with ``NETCO_JOB=<job file>`` in its environment, forwards SIGINT and SIGTERM
   to it, and exits with its exit code (128 + N if signal N ended it).

Bad input (no command after ``--``, an unknown job, a bad file) is one line, exit code 2.
"""

from __future__ import annotations

import argparse
import sys

from host.errors import UsageError

#: A switch failed in the apply: the command did not run (as ``netco controller apply``).
EXIT_SWITCH_ERROR = 3


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``netco run`` arguments."""
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="the controller's desired-state file (.yaml/.yml/.toml)")
    parser.add_argument("--job", required=True, metavar="NAME", help="the job's name in FILE")
    parser.add_argument("--job-file", default=None, metavar="PATH",
                        help="write the job file here and keep it (default: a temporary "
                             "directory, removed when the command ends)")
    parser.add_argument("--state-dir", default=None, metavar="DIR",
                        help="the controller's token state (default $NETCO_STATE_DIR, else "
                             "$XDG_STATE_HOME/netco, else ~/.local/state/netco)")
    parser.add_argument("--timeout", type=float, default=15.0,
                        help="seconds per switch to connect (default 15)")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="the command to run with NETCO_JOB set, after --")
    parser.set_defaults(func=run)


def _command(args: argparse.Namespace) -> list[str]:
    argv = list(args.argv)
    if not argv or argv[0] != "--" or len(argv) == 1:
        raise UsageError("COMMAND: give the command to run after --, e.g. netco run --config "
                         f"{args.config} --job {args.job} -- python train.py")
    return argv[1:]


def run(args: argparse.Namespace) -> int:
    """``netco run``."""
    import logging

    from control_plane.config import ConfigError, load_config
    from control_plane.controller import Controller, run_sync
    from control_plane.job_file import build_job_file
    from control_plane.options import check_text_file
    from control_plane.tokens import TokenStore, TokenStoreError
    from host.errors import OptionError, check_options, writable_file

    command = _command(args)
    check_options(lambda a: check_text_file(a.config, "--config"), args, UsageError)
    if not args.timeout > 0 or args.timeout == float("inf"):
        raise UsageError(f"--timeout {args.timeout}: give a number of seconds > 0")
    if args.job_file is not None:
        try:
            writable_file(args.job_file, "--job-file")
        except OptionError as exc:
            raise UsageError(str(exc)) from None
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        raise UsageError("\n".join(exc.lines())) from None
    job = next((j for j in cfg.jobs if j.name == args.job), None)
    if job is None:
        names = ", ".join(j.name for j in cfg.jobs) or "(none defined)"
        raise UsageError(f"--job: unknown job {args.job!r} in {args.config}; jobs are {names}")
    if getattr(args, "verbose", 0) < 2:
        logging.getLogger("finsy").setLevel(logging.ERROR)
    try:
        ctl = Controller(cfg, timeout=args.timeout, state=TokenStore(args.state_dir))
        results = run_sync(ctl.apply())
    except (ConfigError, FileNotFoundError, TokenStoreError) as exc:
        lines = exc.lines() if isinstance(exc, ConfigError) else [str(exc)]
        raise UsageError("\n".join(lines)) from None
    except KeyboardInterrupt:
        print("netco run: interrupted while applying; the command did not run", file=sys.stderr)
        return 130
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"netco run: error: {r.error}", file=sys.stderr)
    if failed:
        print(f"netco run: {args.config} not applied on {len(failed)} switch(es); the command "
              "did not run", file=sys.stderr)
        return EXIT_SWITCH_ERROR
    print(f"netco run: {args.config}: {ctl.writes} updates written to {len(results)} switch(es); "
          f"job {job.name} (id {job.id}), {len(job.members)} members", file=sys.stderr, flush=True)
    return _run_with_job_file(command, build_job_file(cfg, ctl.placement, job.name,
                                                      ctl.tokens[job.id]), args.job_file)


def _run_with_job_file(command: list[str], job, keep_at: str | None) -> int:
    """Write ``job`` (to ``keep_at``, or a temporary directory removed afterwards) and run
    ``command`` with :data:`~host.transport.jobfile.ENV_JOB` naming it; its exit code."""
    import os
    import shutil
    import signal
    import subprocess
    import tempfile
    from pathlib import Path

    from host.transport.jobfile import ENV_JOB, write

    tmp = None if keep_at else tempfile.mkdtemp(prefix="netco-job-")   # mode 0700
    try:
        path = Path(keep_at) if keep_at else Path(tmp) / f"{job.name}.job.json"
        write(path, job)
        env = {**os.environ, ENV_JOB: str(path.resolve())}
        try:
            proc = subprocess.Popen(command, env=env)
        except OSError as exc:
            raise UsageError(f"COMMAND: cannot run {command[0]!r} ({exc.strerror or exc}); give "
                             "a program on PATH or its path") from None
        old = {}

        def forward(signum: int, _frame) -> None:
            if signum == signal.SIGINT and _terminal_reaches_child():
                return   # Ctrl-C on the terminal reached the command too: no second one
            if proc.poll() is None:
                proc.send_signal(signum)

        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, forward)
        try:
            rc = proc.wait()
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
        return rc if rc >= 0 else 128 - rc
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _terminal_reaches_child() -> bool:
    """True when this process is in its terminal's foreground process group: a Ctrl-C there
    goes to the whole group, the command included (it shares our group)."""
    import os

    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False
