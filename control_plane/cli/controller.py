"""``netco controller``: reconcile P4Runtime switches with a desired-state file.

Examples::

    netco controller show net.yaml              # derived entries per switch (no switch needed)
    netco controller diff net.yaml              # what apply would write (reads only)
    netco controller apply net.yaml             # push pipeline + write only the difference
    netco controller apply net.yaml --prune     # also delete entries the controller did not write
    netco controller status net.yaml --json     # installed entries, drift, per-job counters, drops
    netco controller job net.yaml resnet --out resnet.job   # the job file its workers load
    netco controller rotate net.yaml --job resnet           # a new token for the job

The tokens ``apply`` installs are kept in the controller's state file (``--state-dir``,
default ``$NETCO_STATE_DIR``, ``$XDG_STATE_HOME/netco`` or ``~/.local/state/netco``), so a
restarted switch gets the same ones back.

Exit codes: 0 success (``diff``: in sync), 1 ``diff`` found differences, 2 bad input (the
message names the field), 3 a switch was unreachable, refused us or a write failed.
The file format is documented in docs/controller.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from host.errors import UsageError

EXIT_DIFFERS = 1
EXIT_SWITCH_ERROR = 3


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``netco controller`` subcommands."""
    parser.description = __doc__.split("\n\n")[0]
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser, json_help: str = "print one JSON object",
               switch: bool = True, job: bool = False) -> None:
        p.add_argument("file", metavar="FILE", help="desired-state file (.yaml/.yml/.toml)")
        if job:
            p.add_argument("job", metavar="JOB", help="the job's name in FILE")
        p.add_argument("--json", action="store_true", help=json_help)
        if switch:
            p.add_argument("--switch", action="append", default=None, metavar="NAME",
                           help="only this switch (repeatable; default: all)")
        p.add_argument("--state-dir", default=None, metavar="DIR",
                       help="the controller's token state (tokens.json; default $NETCO_STATE_DIR, "
                            "else $XDG_STATE_HOME/netco, else ~/.local/state/netco)")
        p.add_argument("--plan", default=None, metavar="PLAN",
                       help="also install a ScaleAcross network plan (netco explore plan --out): "
                            "hosts for its ranks, a THC job per DP group, paths for its "
                            "cross-building flows (docs/scaleacross.md)")
        p.add_argument("--tls-ca", default=None, metavar="PEM",
                       help="connect over TLS, trusting switches signed by this CA (docs/security.md)")
        p.add_argument("--tls-cert", default=None, metavar="PEM",
                       help="client certificate for switches that require one (with --tls-key)")
        p.add_argument("--tls-key", default=None, metavar="PEM", help="private key of --tls-cert")
        p.add_argument("--tls-server-name", default=None, metavar="NAME",
                       help="name to check the switches' certificates against (default: host)")

    p = sub.add_parser("apply", help="push the pipeline and write the difference to every switch")
    common(p)
    p.add_argument("--prune", action="store_true",
                   help="also delete foreign entries (installed by somebody else)")
    p.add_argument("--election-id", type=int, default=None,
                   help="P4Runtime election id (default: controller.election_id or 10)")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds per switch to connect")
    p.add_argument("--watch", type=float, default=0.0, metavar="S",
                   help="keep reconciling every S seconds (heals restarted switches); Ctrl-C stops")
    p.add_argument("--rounds", type=int, default=0, metavar="N",
                   help="with --watch: stop after N rounds (default 0: run until interrupted)")
    p.add_argument("--dead-after", type=float, default=0.0, metavar="S",
                   help="with --watch: a rank of a partial-policy job whose per-rank counter stands "
                        "still S seconds while the others contribute is not waited for (its "
                        "set_job.expected leaves it out) until it contributes again (default 0: "
                        "off; docs/protocol.md, 'Absent contributors')")
    p.set_defaults(func=run_apply)

    p = sub.add_parser("diff", help="show what apply would change (read only)")
    common(p)
    p.add_argument("--prune", action="store_true", help="count foreign entries as deletions")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds per switch to connect")
    p.set_defaults(func=run_diff)

    p = sub.add_parser("status", help="installed entries, drift, per-job counters and drops")
    common(p)
    p.add_argument("--entries", action="store_true", help="list every installed difference")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds per switch to connect")
    p.add_argument("--watch", type=float, default=0.0, metavar="SECONDS",
                   help="refresh a table of per-job counters, rates, goodput and drops every "
                        "SECONDS (in place on a terminal, plain blocks into a pipe); Ctrl-C stops "
                        "(docs/telemetry.md)")
    p.add_argument("--rounds", type=int, default=0, metavar="N",
                   help="with --watch: stop after N refreshes (default 0: run until interrupted)")
    p.add_argument("--workers", action="append", default=None, metavar="URL",
                   help="with --watch: also show this training worker's statistics, scraped from "
                        "its metrics server (netco train --metrics-port; repeat per worker)")
    p.set_defaults(func=run_status)

    p = sub.add_parser("show", help="validate the file and print the derived entries (offline)")
    common(p)
    p.set_defaults(func=run_show)

    p = sub.add_parser("job", help="write the job file a job's workers load (after apply)")
    common(p, json_help="print the job file as one JSON object, its token masked",
           switch=False, job=True)
    p.add_argument("--out", required=True, metavar="PATH",
                   help="where to write the job file (mode 0600: it holds the job's token)")
    p.set_defaults(func=run_job)

    p = sub.add_parser("rotate", help="install a new token for a job; its workers must reload")
    common(p, switch=False)
    p.add_argument("--job", action="append", required=True, metavar="NAME",
                   help="the job whose token to replace (repeatable)")
    p.add_argument("--election-id", type=int, default=None,
                   help="P4Runtime election id (default: controller.election_id or 10)")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds per switch to connect")
    p.set_defaults(func=run_rotate)


# ---------------------------------------------------------------------------------------------


def _quiet_finsy(args: argparse.Namespace) -> None:
    # finsy warns on every connection to a target without gNMI; keep that for -vv.
    if getattr(args, "verbose", 0) < 2:
        logging.getLogger("finsy").setLevel(logging.ERROR)


def _load(args: argparse.Namespace):
    from control_plane.config import ConfigError, load_config
    from control_plane.options import check_controller_args

    check_controller_args(args, UsageError)

    try:
        if getattr(args, "plan", None):
            from control_plane.scaleacross.install import install_files

            args.installation = install_files(args.file, args.plan)
            cfg = args.installation.config
        else:
            cfg = load_config(args.file)
    except ConfigError as exc:
        raise UsageError("\n".join(exc.lines())) from exc
    if getattr(args, "switch", None):
        names = [s.name for s in cfg.switches]
        bad = [s for s in args.switch if s not in names]
        if bad:
            raise UsageError(f"--switch: unknown switch {bad[0]!r}; switches are {', '.join(names)}")
    return cfg


def _controller(args: argparse.Namespace, election_id: int | None = None):
    from control_plane.config import ConfigError
    from control_plane.controller import Controller
    from control_plane.tokens import TokenStore, TokenStoreError

    cfg = _load(args)
    try:
        return Controller(cfg, election_id=election_id, timeout=getattr(args, "timeout", 15.0),
                          tls=args.tls, state=TokenStore(args.state_dir))
    except ConfigError as exc:
        raise UsageError("\n".join(exc.lines())) from exc
    except (FileNotFoundError, TokenStoreError) as exc:
        raise UsageError(str(exc)) from exc


def _run_controller(coro):
    """Run a controller coroutine; a token state file that cannot be written is one line."""
    from control_plane.controller import run_sync
    from control_plane.tokens import TokenStoreError

    try:
        return run_sync(coro)
    except TokenStoreError as exc:
        raise UsageError(str(exc)) from None


def _job(args: argparse.Namespace, cfg, name: str, flag: str):
    """Job ``name`` of ``cfg``, or one line naming ``flag`` and the jobs."""
    for j in cfg.jobs:
        if j.name == name:
            return j
    names = ", ".join(j.name for j in cfg.jobs) or "(none defined)"
    raise UsageError(f"{flag}: unknown job {name!r} in {args.file}; jobs are {names}")


def token_line(ctl, job) -> str:
    """What ``show`` says about ``job``'s token: masked, and where it comes from."""
    from control_plane.tokens import mask_token

    source = ctl.token_source[job.id]
    if source == "drawn":
        return "token: drawn at the first apply"
    return f"token {mask_token(ctl.tokens[job.id])} ({source})"


def token_json(ctl, job) -> dict[str, Any]:
    """``token_line`` as JSON: the masked token (None until one is persisted) and its source."""
    from control_plane.tokens import mask_token

    source = ctl.token_source[job.id]
    if source == "drawn":
        return {"masked": None, "source": "drawn at the first apply"}
    return {"masked": mask_token(ctl.tokens[job.id]), "source": source}


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def _print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _print_diffs(results) -> None:
    """Each switch's differences (:func:`_diff_lines`) under its name; nothing for one in sync."""
    for r in results:
        lines = _diff_lines(r)
        if lines:
            print(f"\n{r.switch}:")
            print("\n".join(lines))


def _diff_lines(res) -> list[str]:
    from control_plane.reconcile import describe

    d = res.diff
    if d is None:
        return []
    out = [f"  + {describe(e)}" for e in d.to_insert]
    out += [f"  ~ {describe(e)}" for e in d.to_modify]
    out += [f"  - {describe(e)}" for e in d.to_delete]
    mark = "-" if d.prune else "?"
    out += [f"  {mark} foreign: {describe(e)}" for e in d.foreign]
    return out


def _summary_rows(results, written: bool) -> list[list[Any]]:
    rows = []
    for r in results:
        d = r.diff
        if d is None:
            rows.append([r.switch, r.address, r.pipeline or "-", "-", "-", "-", "-", "-",
                         "ERROR (below)"])
            continue
        state = ("ok" if r.ok else "ERROR (below)") if written else (
            "in sync" if d.in_sync else f"{d.writes} to write")
        if r.ok and d.foreign and not d.prune:
            state += f" ({len(d.foreign)} foreign kept)"
        rows.append([r.switch, r.address, r.pipeline or "-", len(d.to_insert), len(d.to_modify),
                     len(d.to_delete) + (len(d.foreign) if d.prune else 0), len(d.foreign),
                     d.unchanged, state])
    return rows


_SUMMARY_HEADER = ["switch", "address", "pipeline", "insert", "modify", "delete", "foreign",
                   "unchanged", "result"]


# ---------------------------------------------------------------------------------------------


def run_apply(args: argparse.Namespace) -> int:
    """``netco controller apply``."""
    _quiet_finsy(args)
    if args.watch < 0 or args.rounds < 0:
        raise UsageError("--watch and --rounds must not be negative")
    ctl = _controller(args, election_id=args.election_id)
    if args.watch > 0:
        return _watch(args, ctl)
    return _apply_once(args, ctl)


def _watch(args: argparse.Namespace, ctl) -> int:
    """Reconcile every ``--watch`` seconds in one event loop (gRPC's asyncio support binds to
    a single loop); one line (or JSON object) per round that wrote or failed."""
    import asyncio
    import time

    from control_plane.controller import run_sync
    from control_plane.tokens import TokenStoreError

    watch = None
    if getattr(args, "dead_after", 0.0) > 0:
        from control_plane.thc_slot import DeadRankWatch

        watch = DeadRankWatch(ctl, dead_after=args.dead_after)

    async def loop() -> int:
        rounds = 0
        while True:
            t0 = time.monotonic()
            before = ctl.writes
            # ranks found dead (or back) since the last round: this round's apply writes them
            changes = await watch.poll() if watch is not None else []
            try:
                results = await ctl.apply(prune=args.prune, switches=args.switch)
            except TokenStoreError as exc:
                raise UsageError(str(exc)) from None
            rounds += 1
            wrote = ctl.writes - before
            failed = [r for r in results if not r.ok]
            if args.json:
                _print_json_line({"round": rounds, "writes": wrote,
                                  "switches": [r.to_json() for r in results],
                                  **({"ranks": [c.to_json() for c in changes]} if watch else {})})
            elif wrote or failed or rounds == 1 or changes:
                stamp = time.strftime("%H:%M:%S")
                for c in changes:
                    print(f"{stamp} {c.line()}", flush=True)
                per = ", ".join(f"{r.switch}: {r.writes}" if r.ok else f"{r.switch}: unreachable"
                                for r in results)
                print(f"{stamp} round {rounds}: {wrote} updates ({per})", flush=True)
                for r in failed:
                    print(f"{stamp} error: {r.error}", file=sys.stderr, flush=True)
            if args.rounds and rounds >= args.rounds:
                return 0
            await asyncio.sleep(max(0.0, args.watch - (time.monotonic() - t0)))

    try:
        return run_sync(loop())
    except KeyboardInterrupt:
        return 0


def _print_json_line(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _apply_once(args: argparse.Namespace, ctl) -> int:
    results = _run_controller(ctl.apply(prune=args.prune, switches=args.switch))
    failed = [r for r in results if not r.ok]
    if args.json:
        _print_json({"p4info": ctl.p4info_source, "writes": ctl.writes,
                     "switches": [r.to_json() for r in results],
                     # the workers' JobSpec.token (`netco train --token`); a secret: the JSON
                     # goes to the operator, not a log
                     "tokens": {str(k): v for k, v in sorted(ctl.tokens.items())}})
    else:
        print(_table(_summary_rows(results, written=True), _SUMMARY_HEADER))
        print(f"{ctl.writes} updates written to {len(results) - len(failed)} switch(es)")
        for r in failed:
            print(f"error: {r.error}", file=sys.stderr)
    return EXIT_SWITCH_ERROR if failed else 0


def run_diff(args: argparse.Namespace) -> int:
    """``netco controller diff``."""
    _quiet_finsy(args)
    ctl = _controller(args)
    results = _run_controller(ctl.diff(prune=args.prune, switches=args.switch))
    failed = [r for r in results if not r.ok]
    if args.json:
        _print_json({"p4info": ctl.p4info_source, "switches": [r.to_json() for r in results]})
    else:
        print(_table(_summary_rows(results, written=False), _SUMMARY_HEADER))
        _print_diffs(results)
        for r in failed:
            print(f"error: {r.error}", file=sys.stderr)
    if failed:
        return EXIT_SWITCH_ERROR
    return 0 if all(r.diff is not None and r.diff.in_sync for r in results) else EXIT_DIFFERS


def run_status(args: argparse.Namespace) -> int:
    """``netco controller status``."""
    from control_plane.controller import DROP_COUNTER, JOB_COUNTERS, run_sync
    from host.protocol.layout import DropReason

    _quiet_finsy(args)
    if args.watch < 0 or args.rounds < 0:
        raise UsageError("--watch and --rounds must not be negative")
    if (args.rounds or args.workers) and not args.watch:
        raise UsageError("--rounds and --workers go with --watch SECONDS, e.g. --watch 1")
    if args.watch and (args.json or args.entries):
        raise UsageError("--watch draws a table; for machines use --json without --watch, "
                         "or scrape the Prometheus metrics (docs/telemetry.md)")
    ctl = _controller(args)
    if args.watch:
        from control_plane.telemetry import watch_controller

        watch_controller(ctl, args.watch, switches=args.switch, worker_urls=args.workers or [],
                         rounds=args.rounds)
        return 0
    results = run_sync(ctl.status(switches=args.switch))
    failed = [r for r in results if not r.ok]
    jobs = []
    for job in sorted(ctl.cfg.jobs, key=lambda j: j.id):
        base, n = ctl.placement.slots[job.name]
        idx = ctl.placement.index[job.name]
        per_sw = {}
        for r in results:
            if not any(js.job.name == job.name for js in ctl.placement.per_switch.get(r.switch, ())):
                continue
            per_sw[r.switch] = {c.rsplit(".", 1)[-1]: r.counters.get(c, {}).get(idx) for c in JOB_COUNTERS}
        jobs.append({"job": job.name, "id": job.id, "index": idx, "members": len(job.members),
                     "slots": [base, base + n - 1], "lane_bits": job.lane_bits,
                     "policy": job.policy, "counters": per_sw})
    if args.json:
        out = {"p4info": ctl.p4info_source, "switches": [r.to_json() for r in results], "jobs": jobs}
        _print_json(out)
        return EXIT_SWITCH_ERROR if failed else 0
    rows = []
    for r in results:
        d = r.diff
        sync = "-" if d is None else ("in sync" if d.in_sync else f"{d.writes} to write")
        trips = "-" if r.rate_limit_trips is None else r.rate_limit_trips
        rows.append([r.switch, r.address, "yes" if r.ok else "NO", r.pipeline or "-", r.installed,
                     len(d.foreign) if d else "-", sync, trips])
    print(_table(rows, ["switch", "address", "reachable", "pipeline", "entries", "foreign", "drift",
                        "rate-limit trips"]))
    jrows = []
    for j in jobs:
        for sw, c in j["counters"].items():
            jrows.append([j["job"], j["id"], sw, f"{j['slots'][0]}..{j['slots'][1]}", j["lane_bits"],
                          *("-" if c[k] is None else c[k] for k in ("contributions", "results", "resent"))])
    if jrows:
        print()
        print(_table(jrows, ["job", "id", "switch", "slots", "lanes", "contributions", "results",
                             "resent"]))
    drows = []
    for r in results:
        for idx, n in sorted(r.counters.get(DROP_COUNTER, {}).items()):
            if n:
                try:
                    reason = DropReason(idx).name
                except ValueError:
                    reason = f"reason {idx}"
                drows.append([r.switch, reason, n])
    print()
    print(_table(drows, ["switch", "drop reason", "packets"]) if drows else "no drops")
    if args.entries:
        _print_diffs(results)
    for r in failed:
        print(f"error: {r.error}", file=sys.stderr)
    return EXIT_SWITCH_ERROR if failed else 0


def run_show(args: argparse.Namespace) -> int:
    """``netco controller show``: the derived desired state, offline."""
    from control_plane.reconcile import describe

    ctl = _controller(args)
    cfg = ctl.cfg
    chosen = [s.name for s in cfg.switches if not args.switch or s.name in args.switch]
    if args.json:
        _print_json({
            "p4info": ctl.p4info_source,
            "jobs": {j.name: {"id": j.id, "index": ctl.placement.index[j.name],
                              "slot_base": ctl.placement.slots[j.name][0],
                              "num_slots": ctl.placement.slots[j.name][1],
                              "lane_bits": j.lane_bits, "policy": j.policy,
                              "thc": {"b": j.thc.b, "g": j.thc.g, "p": j.thc.p},
                              "table": list(j.thc.table),
                              "token": token_json(ctl, j),
                              "members": [_member(cfg, h, r) for r, h in enumerate(j.members)],
                              "tree": [{"switch": n.switch, "parent": n.parent, "members": list(n.members)}
                                       for n in j.tree]}
                     for j in cfg.jobs},
            "switches": {sw: [describe(e) for e in ctl.desired[sw]] for sw in chosen},
            **({"plan": args.installation.to_json()} if getattr(args, "installation", None) else {}),
        })
        return 0
    print(f"P4Info: {ctl.p4info_source}")
    inst = getattr(args, "installation", None)
    if inst is not None:
        print(f"plan {args.plan}: nodes -> hosts "
              + ", ".join(f"{n}={h}" for n, h in inst.node_hosts.items()))
        for j in inst.jobs:
            print(f"  job {j['job']} (id {j['id']}, {j['method']}): members "
                  f"{', '.join(j['members'])}, root {j['root']}")
        for f in inst.flows:
            for p in f.get("installed", []):
                print(f"  flow {f['flow']} {f['class']} {f['src']}->{f['dst']}: to {p['dst']} via "
                      + " | ".join(" ".join(v) for v in p["via"]))
        for n in inst.notes:
            print(f"  note: {n}")
    for j in sorted(cfg.jobs, key=lambda j: j.id):
        print(f"job {j.name} (id {j.id}): {token_line(ctl, j)}")
    for sw in chosen:
        print(f"\n{sw} ({len(ctl.desired[sw])} entities):")
        for e in ctl.desired[sw]:
            print(f"  {describe(e)}")
    return 0


def run_job(args: argparse.Namespace) -> int:
    """``netco controller job``: write the job file of one job (its token: the persisted one)."""
    from control_plane.job_file import build_job_file
    from control_plane.tokens import mask_token
    from host.errors import OptionError, writable_file
    from host.transport.jobfile import write

    ctl = _controller(args)
    job = _job(args, ctl.cfg, args.job, "JOB")
    if ctl.token_source[job.id] != "persisted":
        raise UsageError(f"job {job.name} has no installed token yet: run `netco controller apply "
                         f"{args.file}` first" + (f" (token state: {ctl.state.path})"
                                                  if args.state_dir else ""))
    try:
        out = writable_file(args.out, "--out")
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    jf = build_job_file(ctl.cfg, ctl.placement, job.name, ctl.tokens[job.id])
    write(out, jf)
    if args.json:
        _print_json({**jf.to_json(), "token": mask_token(jf.token), "path": str(out)})
    else:
        print(f"{out}: job {job.name} (id {job.id}), {jf.world} members "
              f"({', '.join(m.host for m in jf.members)}), token {mask_token(jf.token)}; mode 0600 "
              f"(it holds the job's token)")
    return 0


def run_rotate(args: argparse.Namespace) -> int:
    """``netco controller rotate``: a new token for each ``--job``, installed and persisted;
    one line per job naming the workers that must reload."""
    from control_plane.tokens import mask_token

    _quiet_finsy(args)
    args.switch = None
    ctl = _controller(args, election_id=args.election_id)
    jobs = []
    for name in dict.fromkeys(args.job):
        jobs.append(_job(args, ctl.cfg, name, "--job"))
    for j in jobs:
        ctl.rotate_token(j.name)
    tree = sorted({n.switch for j in jobs for n in j.tree},
                  key=[s.name for s in ctl.cfg.switches].index)
    results = _run_controller(ctl.apply(switches=tree))
    failed = [r for r in results if not r.ok]
    rotated = []
    for j in jobs:
        sws = [n.switch for n in j.tree]
        done = not any(r.switch in sws for r in failed)
        rotated.append({"job": j.name, "id": j.id, "token": mask_token(ctl.tokens[j.id]),
                        "installed": done, "switches": sws, "reload": list(j.members)})
    if args.json:
        _print_json({"writes": ctl.writes, "rotated": rotated,
                     "switches": [r.to_json() for r in results]})
    else:
        for r in rotated:
            if r["installed"]:
                print(f"job {r['job']} (id {r['id']}): new token {r['token']} installed on "
                      f"{', '.join(r['switches'])}; reload workers {', '.join(r['reload'])}: give "
                      f"each a fresh job file (netco controller job {args.file} {r['job']} --out "
                      f"PATH) and restart it (or restart it under netco run)")
            else:
                print(f"job {r['job']} (id {r['id']}): new token NOT installed everywhere (errors "
                      f"below); run `netco controller rotate {args.file} --job {r['job']}` again")
    for r in failed:
        print(f"error: {r.error}", file=sys.stderr)
    return EXIT_SWITCH_ERROR if failed else 0


def _member(cfg, host: str, rank: int) -> dict[str, Any]:
    """What a worker needs to join: its rank and the switch it sends to."""
    h = cfg.host(host)
    sw = cfg.switch(h.switch)
    return {"host": host, "rank": rank, "ip": h.ip, "switch": sw.name, "switch_addr": sw.addr,
            "switch_port": h.port}
