"""One PNG of accuracy over rounds for every method of a comparison."""

from __future__ import annotations

from pathlib import Path

#: How the methods are written in the title (the legend uses the table's keys).
NAMES = {"fielding": "FIELDING", "fedavg": "FedAvg", "ifca": "IFCA", "cfl": "CFL",
         "feddrift": "FedDrift", "oracle": "oracle"}
STYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))
MARKERS = ("o", "s", "^", "v", "D", "x")
#: What the oracle is, under the table and the plot: it knows the true groups but starts a group
#: first seen after a drift from scratch, so it is no upper bound: under label drift (inputs and
#: label map shared by all groups) FIELDING's new cluster starts from a trained model and can
#: end above it (digits, 40 clients, seed 0: oracle 0.934 at round 30, FIELDING 0.948, and an
#: oracle that starts the new group from its other models' mean 0.948).
ORACLE_NOTE = ("oracle: one model per true group; a group first seen after a drift starts from "
               "scratch, so it is a reference, not an upper bound (methods that start a new "
               "cluster from a trained model can end above it)")


def plot_accuracy(result: dict, path: str | Path) -> Path:
    """Plot ``result["methods"][*]["accuracy"]`` (from :func:`harness.compare`) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4.6), constrained_layout=True)
    methods = list(result["methods"].items())
    for i, (name, m) in enumerate(methods):
        acc = m["accuracy"]
        same = [other for other, o in methods[:i] if o["accuracy"] == acc]
        label = name + (f" (same curve as {same[0]})" if same else
                        " (true groups, see below)" if name == "oracle" else "")
        # Dashes and staggered markers keep a curve that coincides with another visible.
        ax.plot(range(1, len(acc) + 1), acc, linestyle=STYLES[i % len(STYLES)],
                lw=2.4 if name == "fielding" else 1.3, marker=MARKERS[i % len(MARKERS)],
                markevery=(i % 3, 3), markersize=4, label=label, zorder=3 if name == "fielding" else 2)
    for r in result["drift_rounds"]:
        ax.axvline(r, color="grey", lw=0.8, ls=":")
    if result.get("target") is not None:
        ax.axhline(result["target"], color="black", lw=0.8, ls="--",
                   label=f"target accuracy {result['target']:g}")
    ax.set_xlabel("round (dotted lines: drift events)")
    ax.set_ylabel("mean client test accuracy")
    others = ", ".join(NAMES.get(n, n) for n, _ in methods if n != "fielding")
    ax.set_title(
        f"FIELDING vs {others}\n{result['scenario']} drift on {result['dataset']}, "
        f"{result['clients']} clients, seed {result['seed']}", fontsize=10)
    ax.grid(alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=8)
    if "oracle" in result["methods"]:
        import textwrap

        # a caption under the axes (constrained layout makes room for a supxlabel)
        fig.supxlabel(textwrap.fill(ORACLE_NOTE, 120), fontsize=7.5, color="dimgrey")
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
