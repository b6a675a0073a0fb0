"""``netco explore``: predict, search, validate and plan (ScaleAcross Explorer)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from host.errors import UsageError

log = logging.getLogger(__name__)

#: plans with more schedule ops than this are not simulated by default (seconds of Python)
SIM_OPS_LIMIT = 400_000


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="explore_cmd", metavar="ACTION")

    p = sub.add_parser("predict", help="time, breakdown and memory of the scenario's plan")
    p.add_argument("scenario", help="scenario file (.json/.yaml) with a parallel section")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-simulate", action="store_true",
                   help="skip the discrete-event check of the analytical time")
    p.set_defaults(func=run_predict)

    s = sub.add_parser("search", help="rank parallel plans for a scenario")
    s.add_argument("scenario", help="scenario file; a parallel section pins those fields")
    s.add_argument("--top", type=int, default=5, help="number of plans to show (default 5)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--plot", nargs="?", const="scaleacross_search.png", default=None,
                   metavar="PNG", help="write the breakdown of the top plans (default name "
                   "scaleacross_search.png)")
    s.add_argument("--all", action="store_true",
                   help="list every plan; default: only the fastest plan of each layout "
                   "(degrees, microbatch, schedule, recompute, crossing)")
    s.add_argument("--simulate", type=int, default=None, metavar="K",
                   help="check the K best plans and Megatron's default with the event "
                   "simulation (default: every plan shown; 0 = off)")
    s.set_defaults(func=run_search)

    v = sub.add_parser("validate", help="calibrate on published runs, report held-out error")
    v.add_argument("--json", action="store_true", help="print one JSON object")
    v.set_defaults(func=run_validate)

    n = sub.add_parser("plan", help="write the network plan (ranks, flows, paths, trees)")
    n.add_argument("scenario", help="scenario file; without a parallel section the best "
                   "searched plan is used")
    n.add_argument("--out", required=True, help="output JSON file")
    n.add_argument("--json", action="store_true", help="print a JSON summary")
    n.set_defaults(func=run_plan)

    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _load(path: str):
    from control_plane.scaleacross.scenario import ScenarioError, load_scenario

    try:
        return load_scenario(path)
    except ScenarioError as exc:
        raise UsageError(str(exc)) from exc


def _fmt_breakdown(b: dict[str, float]) -> str:
    from control_plane.scaleacross.cost import BREAKDOWN_LABELS, BREAKDOWN_SHOWN_S

    return ", ".join(f"{BREAKDOWN_LABELS.get(k, k)} {v:.3f} s" for k, v in b.items()
                     if v > BREAKDOWN_SHOWN_S)


def _sim_ops(sc, pl) -> int:
    """Schedule operations the event simulation of ``pl`` runs."""
    return 2 * pl.pp * pl.interleave * pl.microbatches(sc.global_batch)


def _simulate(sc, pl, eff=None) -> dict | None:
    from control_plane.scaleacross.simulate import simulate

    ops = _sim_ops(sc, pl)
    if ops > SIM_OPS_LIMIT:
        log.warning("not simulating: %d schedule ops", ops)
        return None
    return simulate(sc, pl, eff).to_dict()


def run_predict(args: argparse.Namespace) -> int:
    from control_plane.scaleacross.cost import BREAKDOWN_KEYS, evaluate
    from control_plane.scaleacross.plan import resolve_plan
    from control_plane.scaleacross.scenario import ScenarioError

    sc = _load(args.scenario)
    try:
        pl = resolve_plan(sc)
    except ScenarioError as exc:
        raise UsageError(str(exc)) from exc
    r = evaluate(sc, pl.to_arrays())
    out = {
        "iteration_s": float(r["iteration_s"][0]),
        "breakdown": {k: float(r[k][0]) for k in BREAKDOWN_KEYS},
        "memory_gb_per_gpu": float(r["memory_gb_per_gpu"][0]),
        "fits": bool(r["fits"][0]),
        "plan": pl.to_dict(),
        "microbatches": int(r["m"][0]),
        "buildings_used": int(r["buildings_used"][0]),
        "dp_sync_s": float(r["dp_sync_s"][0]),
    }
    if not args.no_simulate:
        sim = _simulate(sc, pl)
        out["simulated"] = sim
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{sc.name}: {pl.world} GPUs over {out['buildings_used']} building(s), "
          f"plan {_plan_str(pl)}")
    print(f"  iteration {out['iteration_s']:.3f} s  ({_fmt_breakdown(out['breakdown'])})")
    if out.get("simulated"):
        print(f"  event simulation {out['simulated']['iteration_s']:.3f} s")
    fit = "fits" if out["fits"] else f"DOES NOT FIT ({sc.hardware.memory_gb:g} GiB)"
    print(f"  memory {out['memory_gb_per_gpu']:.1f} GiB per GPU: {fit}")
    return 0


#: How a plan's recomputation, crossing and schedule read in tables (the JSON keeps the codes).
_RECOMPUTE = {"none": "none", "selective": "selective", "full": "full"}


def _schedule(pl) -> str:
    return f"interleaved, {pl.interleave} chunks" if pl.interleave > 1 else "1F1B"


def _crossing(pl) -> str:
    return {"none": "none (one building)", "dp": "DP", "pp": "PP"}.get(pl.cross, pl.cross)


def _overlap(pl) -> str:
    parts = [x for x, on in (("DP sync", pl.overlap_dp), ("EP comm.", pl.overlap_ep)) if on]
    return " + ".join(parts) or "nothing"


def _plan_str(pl) -> str:
    """One plan in words: degrees, micro-batch, schedule, recomputation, ZeRO, crossing."""
    deg = f"TP {pl.tp} x PP {pl.pp} x DP {pl.dp}"
    if pl.cp > 1:
        deg += f" x CP {pl.cp}"
    if pl.ep > 1:
        deg += f", EP {pl.ep}"
    s = (f"{deg}, micro-batch {pl.microbatch}, {_schedule(pl)}, recompute {pl.recompute}, "
         f"ZeRO-{pl.zero}, crosses buildings: {_crossing(pl)}")
    if pl.cross == "dp":
        s += f" ({pl.dp_sync} sync)"
    return s + f", overlapped with compute: {_overlap(pl)}"


#: The line under the tables that spells out their short column names.
DEGREES_NOTE = ("TP, PP, DP, CP, EP: tensor-, pipeline-, data-, context- and expert-parallel "
                "degrees (GPUs per group); ZeRO: optimizer-state sharding stage")


def run_search(args: argparse.Namespace) -> int:
    from control_plane.scaleacross.cost import BREAKDOWN_KEYS, evaluate
    from control_plane.scaleacross.plot import plot_breakdown
    from control_plane.scaleacross.scenario import ScenarioError
    from control_plane.scaleacross.search import megatron_default, ranked, search

    if args.top < 1:
        raise UsageError("--top: must be >= 1")
    if args.simulate is not None and args.simulate < 0:
        raise UsageError(f"--simulate {args.simulate}: give a number of plans >= 0")
    n_sim = args.top if args.simulate is None else args.simulate
    sc = _load(args.scenario)
    try:
        res = search(sc, progress=not args.json and sys.stderr.isatty())
        base = megatron_default(sc)
    except ScenarioError as exc:
        raise UsageError(str(exc)) from exc
    if res.n_feasible == 0:
        raise UsageError("no plan fits memory and the buildings; add GPUs or memory")
    top = ranked(res, args.top, distinct=not args.all)
    rb = evaluate(sc, base.to_arrays())
    base_t = float(rb["iteration_s"][0])
    plans = []
    for i, (pl, met) in enumerate(top):
        row = {"rank": i + 1, "plan": pl.to_dict(), **met,
               "gain_vs_megatron_pct": 100 * (1 - met["iteration_s"] / base_t)}
        if i < n_sim:
            row["simulated"] = _simulate(sc, pl)
        plans.append(row)
    out = {
        "scenario": sc.name,
        "searched": res.n_total, "feasible": res.n_feasible,
        "search_s": res.seconds,
        "plans": plans,
        "megatron_default": {"plan": base.to_dict(), "iteration_s": base_t,
                             "breakdown": {k: float(rb[k][0]) for k in BREAKDOWN_KEYS},
                             "memory_gb_per_gpu": float(rb["memory_gb_per_gpu"][0])},
    }
    if n_sim:
        out["megatron_default"]["simulated"] = _simulate(sc, base)
    if args.plot:
        rows = [(f"#{p['rank']}: {_plan_str(pl)}", p["breakdown"])
                for p, (pl, _) in zip(plans, top, strict=True)]
        rows.append((f"Megatron default: {_plan_str(base)}", out["megatron_default"]["breakdown"]))
        title = f"{sc.name}: time per iteration of the {len(plans)} best plans vs Megatron's default"
        out["plot"] = str(plot_breakdown(rows, args.plot, title=title))
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(search_tables(sc, res, plans, [pl for pl, _ in top], base, out["megatron_default"],
                        n_sim))
    if args.plot:
        print(f"wrote {out['plot']}")
    return 0


def search_tables(sc, res, plans: list[dict], layouts: list, base, megatron: dict,
                  n_sim: int) -> str:
    """The text of ``netco explore search``: a heading, three tables (time, layout, breakdown:
    one row per plan and one for Megatron's default) and the lines that explain them."""
    from control_plane.scaleacross.cost import BREAKDOWN_KEYS, BREAKDOWN_LABELS, BREAKDOWN_SHOWN_S
    from host.columns import format_columns

    rows = [(f"#{p['rank']}", p, pl) for p, pl in zip(plans, layouts, strict=True)]
    rows.append(("Megatron default", megatron, base))
    notes: dict[str, str] = {}

    def simulated(i: int, p: dict, pl) -> str:
        if p.get("simulated"):
            return f"{p['simulated']['iteration_s']:.3f}"
        if "simulated" in p:   # asked for, but too long to simulate
            notes["too long"] = (f"too long: more than {SIM_OPS_LIMIT:,} schedule operations "
                                 "to simulate")
            return "too long"
        notes["not run"] = (f"not run: --simulate {n_sim} checks the {n_sim} best plans"
                            + (" and Megatron's default" if n_sim else "")
                            + "; raise it to check more")
        return "not run"

    def versus(p: dict) -> str:
        if "gain_vs_megatron_pct" not in p:
            return "(reference)"
        g = p["gain_vs_megatron_pct"]
        return "same" if round(g, 1) == 0 else f"{abs(g):.1f}% {'less' if g > 0 else 'more'}"

    timing = format_columns(
        ("plan", "time per iteration (s)", "event simulation (s)", "vs Megatron's default",
         "memory per GPU (GiB)"),
        [(name, f"{p['iteration_s']:.3f}", simulated(i, p, pl), versus(p),
          f"{p['memory_gb_per_gpu']:.1f}") for i, (name, p, pl) in enumerate(rows)])
    layout = format_columns(
        ("plan", "TP", "PP", "DP", "CP", "EP", "micro-batch", "schedule", "recompute", "ZeRO",
         "crosses buildings", "DP sync", "overlapped with compute"),
        [(name, str(pl.tp), str(pl.pp), str(pl.dp), str(pl.cp), str(pl.ep), str(pl.microbatch),
          _schedule(pl), _RECOMPUTE.get(pl.recompute, pl.recompute), str(pl.zero),
          _crossing(pl), pl.dp_sync, _overlap(pl)) for name, p, pl in rows],
        align="lrrrrrrllrlll")
    keys = [k for k in BREAKDOWN_KEYS
            if any(p["breakdown"].get(k, 0) > BREAKDOWN_SHOWN_S for _, p, _ in rows)]
    parts = format_columns(
        ("plan", *(BREAKDOWN_LABELS[k] for k in keys)),
        [(name, *(f"{p['breakdown'].get(k, 0.0):.3f}" for k in keys)) for name, p, _ in rows])
    lines = [f"{sc.name}: priced {res.n_total} plans ({res.n_feasible} feasible) in "
             f"{res.seconds:.2f} s; the {len(plans)} fastest"
             + (" (one per layout)" if len(plans) > 1 else "") + " and Megatron's default:",
             "", timing]
    lines += [f"  {n}" for n in notes.values()]
    lines += ["", "layout:", layout, f"  {DEGREES_NOTE}",
              "", "time per iteration by part (s):", parts]
    return "\n".join(lines)


def _vs_megatron(gain_pct: float) -> str:
    """``43.7% less time than Megatron`` for a positive gain, ``... more time ...`` otherwise."""
    if round(gain_pct, 1) == 0:
        return "as fast as Megatron's default"
    word = "less" if gain_pct > 0 else "more"
    return f"{abs(gain_pct):.1f}% {word} time than Megatron's default"


def run_validate(args: argparse.Namespace) -> int:
    from control_plane.scaleacross.validate import run_validation

    out = run_validation()
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    c = out["constants"]
    print(f"constants: eta_max {c['eta_max']:.4f}, omega {c['omega']:.3f} (element-wise "
          f"bytes per activation byte), "
          f"eta_net {c['eta_net']:.4f}, eta_fp8 {c['eta_fp8']:.4f}")
    print(f"training split: {out['split']['training']}; every other row is held out")
    print()
    head = (f"{'split':<5} {'row':<27} {'publication':<27} {'GPUs':>5} {'t/p/dp':>9} "
            f"{'measured s':>10} {'predicted s':>11} {'error':>8}")
    print(head)
    print("-" * len(head))
    for r in out["rows"]:
        cf = r["config"]
        tag = "train" if r["used_for_calibration"] else "held"
        tpd = f"{cf['tp']}/{cf['pp']}/{cf['dp']}"
        print(f"{tag:<5} {r['name']:<27} {r['publication']:<27} {cf['gpus']:>5} "
              f"{tpd:>9} {r['measured_s']:>10.3f} "
              f"{r['predicted_s']:>11.3f} {r['error_pct']:>+7.2f}%")
    print()
    print(f"{'held-out publication':<27} {'rows':>4} {'MAPE':>7} {'worst':>7}")
    for pub, st in out["heldout_by_publication"].items():
        print(f"{pub:<27} {st['n']:>4} {st['mape_pct']:>6.2f}% {st['max_abs_pct']:>6.2f}%")
    ind = out["heldout_independent"]
    if ind["n"]:
        print(f"{'independent publications':<27} {ind['n']:>4} {ind['mape_pct']:>6.2f}% "
              f"{ind['max_abs_pct']:>6.2f}%")
    t = out["target"]
    print(f"training rows MAPE {out['mape_calibration_pct']:.2f}%; all held-out MAPE "
          f"{out['mape_heldout_pct']:.2f}%, worst row {out['max_abs_heldout_pct']:.2f}% "
          f"(target <= {t['mape_pct']:g}% and <= {t['max_row_pct']:g}%: "
          f"{'met' if t['met'] else 'not met'}; on the independent publications' rows alone: "
          f"{'met' if t['met_independent'] else 'not met'})")
    return 0


def run_plan(args: argparse.Namespace) -> int:
    from control_plane.scaleacross.netplan import build_network_plan
    from control_plane.scaleacross.plan import resolve_plan
    from control_plane.scaleacross.scenario import ScenarioError
    from control_plane.scaleacross.search import ranked, search

    sc = _load(args.scenario)
    pr = sc.parallel
    try:
        if pr.tp is None and pr.pp is None and pr.dp is None:
            res = search(sc)
            if res.n_feasible == 0:
                raise UsageError("no plan fits memory and the buildings")
            pl = ranked(res, 1)[0][0]
        else:
            pl = resolve_plan(sc)
    except ScenarioError as exc:
        raise UsageError(str(exc)) from exc
    doc = build_network_plan(sc, pl)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    summary = {"out": args.out, "plan": doc["plan"], "ranks": len(doc["ranks"]),
               "cross_building_flows": len(doc["cross_building_flows"]),
               "aggregation_trees": len(doc["aggregation_trees"]),
               "iteration_s": doc["predicted"]["iteration_s"]}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"wrote {args.out}: {summary['ranks']} ranks, {summary['cross_building_flows']} "
              f"cross-building flows, {summary['aggregation_trees']} aggregation trees "
              f"({_plan_str(pl)})")
    return 0
