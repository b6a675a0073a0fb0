"""PNG of the per-component time breakdown of ranked plans (matplotlib, Agg backend)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from control_plane.scaleacross.cost import BREAKDOWN_KEYS

__all__ = ["plot_breakdown"]

_COLORS = {"compute": "#4c72b0", "bubble": "#dd8452", "tp_comm": "#55a868", "cp_comm": "#8172b3",
           "ep_comm": "#937860", "zero3_gather": "#da8bc3", "pp_comm": "#c44e52",
           "dp_comm": "#ccb974", "optimizer": "#64b5cd"}


def plot_breakdown(rows: list[tuple[str, dict[str, float]]], path: str | Path,
                   title: str = "") -> Path:
    """Horizontal stacked bars, one per ``(label, breakdown)``, fastest at the top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 0.75 * len(rows) + 1.6))
    labels = [textwrap.fill(r[0], 42) for r in rows][::-1]
    left = [0.0] * len(rows)
    for key in BREAKDOWN_KEYS:
        vals = [r[1].get(key, 0.0) for r in rows][::-1]
        if not any(v > 0 for v in vals):
            continue
        ax.barh(labels, vals, left=left, color=_COLORS[key], label=key)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_xlabel("time per iteration (s)")
    ax.set_title(title or "iteration time breakdown")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
