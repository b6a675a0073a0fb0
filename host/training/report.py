"""Summaries, link emulation and the comparison plot of training runs.

Link emulation (``--link-mbps B``): each step is charged the run's measured compute per step --
the worker's CPU time in the step, median over the steps (wall time on a shared 2-core machine
varies by tens of percent between identical runs with the load of other processes) -- plus the time
its bytes take on a full-duplex link of ``B`` Mbit/s per worker,
``max(sent, received) · 8 / (B · 10⁶)`` seconds, with no overlap of communication and compute.
It is an emulation from counted bytes, not a measurement of a network, and every figure derived
from it is labelled ``"time_basis": "emulated"``. On a shaped testbed
(:mod:`control_plane.testbed.nsrack`) the bytes really cross links of that speed and the time to
target is the measured wall-clock time of the training steps (``"time_basis": "measured"``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

FP32_BYTES = 4


def link_seconds(sent: int, received: int, mbps: float) -> float:
    """Seconds a step's bytes occupy a full-duplex ``mbps`` Mbit/s link (the busier direction)."""
    return max(sent, received) * 8.0 / (mbps * 1e6)


#: What a time-to-target figure is (the ``time_basis`` key of summaries and reports).
TIME_BASES = ("measured", "emulated")


#: Evaluations averaged by the time-to-target rule of the comparisons (:func:`summarize`,
#: ``held=True``): the target counts as reached at the first evaluation from which the mean
#: of the last this many held-out metrics stays at or above it until the end of the run, so
#: that neither one lucky evaluation on a noisy edge nor one unlucky one later decides a
#: comparison.
TARGET_WINDOW = 3


def smoothed(metrics: Sequence[float], window: int) -> list[float]:
    """Trailing mean of ``metrics`` over ``window`` values (fewer at the start)."""
    out = []
    for i in range(len(metrics)):
        w = metrics[max(0, i - window + 1) : i + 1]
        out.append(sum(w) / len(w))
    return out


def target_rule(window: int, held: bool) -> str:
    """The time-to-target rule of :func:`summarize` in words."""
    what = (f"the mean of the last {window} evaluations" if window > 1 else "the held-out metric")
    if held:
        return f"first evaluation from which {what} stays at or past the target to the end of the run"
    return f"first evaluation at which {what} reaches the target"


def summarize(run: dict, *, target: float, link_mbps: float | None = None,
              time_basis: str | None = None, window: int = 1, held: bool = False) -> dict:
    """Add the headline numbers of one run (from :func:`host.training.harness.train`).

    Returns a dict with final metric and held-out loss, bytes per step (mean over all steps,
    per worker) and their ratio to plain fp32 (``4 × parameters`` each way), the first step at
    which the held-out metric reached ``target``, and the time to it: measured wall time and,
    with ``link_mbps``, the emulated time (median CPU time per step + link time of the step's
    bytes, summed).

    ``window`` and ``held`` are the time-to-target rule: the target counts as reached at the
    first evaluation where the trailing mean of the last ``window`` held-out metrics (fewer at
    the first evaluations) reaches it and, with ``held``, stays there at every later
    evaluation of the run (the comparisons use ``window=TARGET_WINDOW, held=True``; the
    defaults, 1 and False, take the first evaluation that reaches it). The first raw crossing
    is reported too (``first_crossing_step``).

    ``time_basis`` says which of the two is the run's ``time_to_target_s`` / ``time_s``:
    ``"measured"`` (wall clock; the default without ``link_mbps`` and for runs on a shaped
    testbed) or ``"emulated"`` (the default with ``link_mbps``).
    """
    if time_basis is None:
        time_basis = "emulated" if link_mbps else "measured"
    if time_basis not in TIME_BASES:
        raise ValueError(f"time_basis={time_basis!r}: use one of {', '.join(TIME_BASES)}")
    if time_basis == "emulated" and not link_mbps:
        raise ValueError("an emulated time needs link_mbps")
    if window < 1:
        raise ValueError(f"window={window}: must be >= 1 evaluation")
    recs = run["records"]
    hib = run["higher_is_better"]
    evals = [r for r in recs if r["metric"] is not None]
    fp32 = FP32_BYTES * run["params"]
    n = len(recs)
    sent = sum(r["bytes_sent"] for r in recs)
    recv = sum(r["bytes_received"] for r in recs)
    wall = cum_emul = 0.0
    hit = first = None
    seen: list[float] = []
    cands: list[tuple[bool, dict]] = []   # per evaluation: (smoothed metric meets, where)
    compute_step = statistics.median(r.get("cpu_s", r["compute_s"]) for r in recs) if recs else 0.0
    for r in recs:
        wall += r["wall_s"]
        if link_mbps:
            cum_emul += compute_step + link_seconds(r["bytes_sent"], r["bytes_received"], link_mbps)
        r["emulated_s"] = cum_emul if link_mbps else None
        m = r["metric"]
        if m is None:
            continue
        seen.append(m)
        sm = smoothed(seen[-window:], window)[-1]
        if first is None and (m >= target if hib else m <= target):
            first = r["step"]
        cands.append((sm >= target if hib else sm <= target,
                      {"step": r["step"], "wall_s": wall, "emulated_s": cum_emul if link_mbps else None}))
    for i, (ok, where) in enumerate(cands):
        if ok and (not held or all(c[0] for c in cands[i:])):
            hit = where
            break
    last = evals[-1] if evals else {"metric": math.nan, "eval_loss": math.nan}
    return {
        "compressor": run["compressor"],
        "final_metric": last["metric"],
        "final_eval_loss": last["eval_loss"],
        "final_train_loss": recs[-1]["loss"] if recs else math.nan,
        "bytes_sent_per_step": sent / max(n, 1),
        "bytes_received_per_step": recv / max(n, 1),
        "uplink_vs_fp32": sent / max(n, 1) / fp32,
        "downlink_vs_fp32": recv / max(n, 1) / fp32,
        "total_bytes_sent": sent,
        "total_bytes_received": recv,
        "compute_s": sum(r["compute_s"] for r in recs),
        "cpu_s": sum(r.get("cpu_s", 0.0) for r in recs),
        "compute_s_median_step": compute_step,
        "comm_s": sum(r["comm_s"] for r in recs),
        "wall_s": wall,
        "emulated_s": cum_emul if link_mbps else None,
        "target": target,
        "target_rule": target_rule(window, held),
        "target_window": window,
        "target_held": held,
        "first_crossing_step": first,
        "steps_to_target": hit["step"] if hit else None,
        "wall_to_target_s": hit["wall_s"] if hit else None,
        "emulated_to_target_s": hit["emulated_s"] if hit else None,
        "time_basis": time_basis,
        "time_s": wall if time_basis == "measured" else cum_emul,
        "time_to_target_s": (None if hit is None else
                             hit["wall_s"] if time_basis == "measured" else hit["emulated_s"]),
    }


def gaps(summaries: dict[str, dict], higher_is_better: bool, reference: str = "none") -> dict[str, dict]:
    """Each compressor's final metric and held-out loss against ``reference`` (uncompressed).

    ``metric_gap`` is in the metric's units, signed so that positive means worse than the
    reference (accuracy points lost, or extra bits per character); ``loss_rel`` is the relative
    increase of the held-out loss.
    """
    ref = summaries.get(reference)
    if ref is None:
        return {}
    out = {}
    for name, s in summaries.items():
        d = s["final_metric"] - ref["final_metric"]
        out[name] = {
            "metric_gap": -d if higher_is_better else d,
            "loss_rel": (s["final_eval_loss"] - ref["final_eval_loss"]) / ref["final_eval_loss"],
        }
    return out


#: How tables and plot legends name the compressors (the JSON keeps the short labels).
DISPLAY_NAMES = {"none": "fp32 all-reduce", "fp16": "fp16 all-reduce", "thc": "THC",
                 "thc-noef": "THC without error feedback"}


def display_name(label: str, aggregator: str | None = None) -> str:
    """A compressor's name in tables and legends: ``none`` is ``fp32 all-reduce``,
    ``powersgd-r4`` ``PowerSGD rank 4``, ``thc-noef`` ``THC without error feedback``; a THC run
    summed by a switch (``aggregator="network"``) says ``via switch``."""
    if label.startswith("powersgd-r"):
        name = f"PowerSGD rank {label.removeprefix('powersgd-r')}"
    else:
        name = DISPLAY_NAMES.get(label, label)
    if aggregator == "network" and label.startswith("thc"):
        name = name.replace("THC", "THC via switch", 1)
    return name


def time_axis_label(time_basis: str, link_mbps: float) -> str:
    """The time axis of :func:`plot_comparison`: says 'emulated' (or 'measured') once."""
    if time_basis == "measured":
        return f"measured wall-clock time, links shaped to {link_mbps:g} Mbit/s (s)"
    return f"emulated time, {link_mbps:g} Mbit/s per worker (s)"


def summaries_rule(summaries: Mapping[str, dict] | None) -> str:
    """The time-to-target rule of ``summaries`` in a few words, for a legend."""
    s = next(iter((summaries or {}).values()), {})
    w = s.get("target_window", 1)
    what = f"mean of {w} evaluations" if w > 1 else "one evaluation"
    return what + (", held to the end" if s.get("target_held") else "")


def plot_comparison(runs: Sequence[dict], path: str, *, link_mbps: float | None = None,
                    target: float | None = None, labels: Mapping[str, str] | None = None,
                    time_basis: str = "emulated", summaries: Mapping[str, dict] | None = None,
                    speedup: tuple[str, str] | None = None) -> None:
    """One PNG: metric vs step, metric vs cumulative bytes (per worker, sent + received) and,
    with ``link_mbps``, metric vs time: the emulated time (``time_basis="emulated"``) or the
    measured wall-clock time of the steps on shaped links (``"measured"``); one line per
    compressor, each with its own colour, dashes and markers at the evaluations.

    ``labels`` maps a run's compressor to its name in the legend and title (default:
    :func:`display_name`, as the tables print it); one legend under all panels names every
    line, the target and the time-to-target marks. ``summaries`` (from :func:`summarize`, by
    compressor) marks where each run reached the target by the summary's rule (a star on the
    step and time panels). ``speedup``, two compressors ``(fast, slow)``, annotates the time
    panel with how much sooner the first reached the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    def name_of(run: dict) -> str:
        return (labels or {}).get(run["compressor"],
                                  display_name(run["compressor"], run.get("aggregator")))

    panels = 3 if link_mbps else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.6), constrained_layout=True)
    styles = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)))
    markers = ("o", "s", "^", "v", "D", "x")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    marks = []   # (panel, x, colour) of each time-to-target point
    for i, run in enumerate(runs):
        recs = run["records"]
        steps, metric, mbytes, secs = [], [], [], []
        total = 0
        wall = 0.0
        for r in recs:
            total += r["bytes_sent"] + r["bytes_received"]
            wall += r["wall_s"]
            if r["metric"] is not None:
                steps.append(r["step"])
                metric.append(r["metric"])
                mbytes.append(total / 1e6)
                secs.append(wall if time_basis == "measured" else r.get("emulated_s"))
        color = colors[i % len(colors)]
        # Own colour, dashes and markers keep a run visible where another follows it closely.
        style = {"label": name_of(run), "linestyle": styles[i % len(styles)], "color": color,
                 "marker": markers[i % len(markers)], "markersize": 3.5, "lw": 1.4,
                 "alpha": 0.9}
        axes[0].plot(steps, metric, **style)
        axes[1].plot(mbytes, metric, **style)
        if link_mbps:
            axes[2].plot(secs, metric, **style)
        s = (summaries or {}).get(run["compressor"])
        if s and s.get("steps_to_target") and target is not None:
            marks.append((0, s["steps_to_target"], color))
            if link_mbps and s.get("time_to_target_s") is not None:
                marks.append((2, s["time_to_target_s"], color))
    name = runs[0]["metric_name"].replace("_", " ")
    axes[0].set_xlabel("step")
    axes[1].set_xlabel("MB sent + received per worker (cumulative)")
    axes[1].set_xscale("log")
    axes[1].xaxis.set_minor_formatter(NullFormatter())  # minor labels of a short log axis overlap
    if link_mbps:
        axes[2].set_xlabel(time_axis_label(time_basis, link_mbps))
    for ax in axes:
        ax.set_ylabel(f"held-out {name}")
        ax.grid(alpha=0.3)
        if target is not None:
            ax.axhline(target, color="grey", lw=0.8, ls="--", label=f"target {name} {target:g}")
    star = {"marker": "*", "markersize": 13, "markeredgecolor": "black", "markeredgewidth": 0.6,
            "linestyle": "none"}
    for panel, x, color in marks:
        axes[panel].plot([x], [target], color=color, zorder=5, **star)
    if speedup and summaries and link_mbps:
        fast, slow = (summaries.get(k, {}).get("time_to_target_s") for k in speedup)
        names = {r["compressor"]: name_of(r) for r in runs}
        if fast and slow:
            axes[2].annotate(
                f"{names.get(speedup[0], speedup[0])} reaches the target\n"
                f"{slow / fast:.1f}x sooner ({fast:.1f} s vs {slow:.1f} s)",
                xy=(fast, target), xytext=(0.97, 0.06), textcoords="axes fraction",
                ha="right", va="bottom", fontsize=9,
                bbox={"boxstyle": "round", "fc": "white", "ec": "grey"},
                arrowprops={"arrowstyle": "->", "color": "black"})
            axes[2].annotate("", xy=(fast, target), xytext=(slow, target),
                             arrowprops={"arrowstyle": "<->", "color": "black", "lw": 1.2})
        else:
            missed = [names.get(k, k) for k, t in zip(speedup, (fast, slow), strict=True) if not t]
            axes[2].text(0.97, 0.06, f"target not reached by {' nor '.join(missed)}\n"
                         "in this run: no speedup to show", transform=axes[2].transAxes,
                         ha="right", va="bottom", fontsize=9,
                         bbox={"boxstyle": "round", "fc": "white", "ec": "grey"})
    handles, names_ = axes[0].get_legend_handles_labels()
    if marks:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], markerfacecolor="white", **star))
        names_.append(f"reached the target ({summaries_rule(summaries)}; star in the run's colour)")
    fig.legend(handles, names_, loc="outside lower center", ncol=min(len(names_), 4),
               frameon=False)
    r0 = runs[0]
    compared = " vs ".join(name_of(r) for r in runs) if len(runs) <= 3 else \
        f"{len(runs)} compressors"
    fig.suptitle(f"{r0['task']}, {r0['workers']} workers, seed {r0['seed']}: held-out {name} of "
                 f"{compared}")
    fig.savefig(path, dpi=110)
    plt.close(fig)
