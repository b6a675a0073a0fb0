"""PNG of the per-component time breakdown of ranked plans (matplotlib, Agg backend)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from control_plane.scaleacross.cost import BREAKDOWN_KEYS, BREAKDOWN_LABELS, BREAKDOWN_SHOWN_S

__all__ = ["plot_breakdown"]

_COLORS = {"compute": "#4c72b0", "bubble": "#dd8452", "tp_comm": "#55a868", "cp_comm": "#8172b3",
           "ep_comm": "#937860", "zero3_gather": "#da8bc3", "grad_accum": "#8c8c8c",
           "pp_comm": "#c44e52",
           "dp_comm": "#ccb974", "optimizer": "#64b5cd"}


def plot_breakdown(rows: list[tuple[str, dict[str, float]]], path: str | Path,
                   title: str = "") -> Path:
    """Horizontal stacked bars, one per ``(label, breakdown)``, fastest at the top; the legend
    names the parts as the tables of ``netco explore search`` do (:data:`BREAKDOWN_LABELS`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 1.0 * len(rows) + 1.6))
    labels = [textwrap.fill(r[0], 48) for r in rows][::-1]
    left = [0.0] * len(rows)
    for key in BREAKDOWN_KEYS:
        vals = [r[1].get(key, 0.0) for r in rows][::-1]
        if not any(v > BREAKDOWN_SHOWN_S for v in vals):
            continue
        ax.barh(labels, vals, left=left, color=_COLORS[key], label=BREAKDOWN_LABELS[key])
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
