"""One PNG of accuracy over rounds for every method of a comparison."""

from __future__ import annotations

from pathlib import Path


def plot_accuracy(result: dict, path: str | Path) -> Path:
    """Plot ``result["methods"][*]["accuracy"]`` (from :func:`harness.compare`) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, m in result["methods"].items():
        acc = m["accuracy"]
        style = "--" if name == "oracle" else "-"
        width = 2.2 if name == "fielding" else 1.2
        ax.plot(range(1, len(acc) + 1), acc, style, lw=width, label=name)
    for r in result["drift_rounds"]:
        ax.axvline(r, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("round (dotted: drift events)")
    ax.set_ylabel("mean client test accuracy")
    ax.set_title(
        f"FIELDING vs baselines: {result['scenario']} drift on {result['dataset']}, "
        f"{result['clients']} clients, seed {result['seed']}"
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
