"""Plain-text tables for the command line: one header row, columns two spaces apart."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["format_columns"]


def format_columns(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1,
                   align: str | None = None) -> str:
    """A table of ``header`` and ``rows`` (strings), columns two spaces apart, no trailing
    blanks: the first ``left`` columns left-aligned, the others right-aligned, or as ``align``
    says, one letter per column (``l`` left, ``r`` right)."""
    cells = [tuple(header), *(tuple(r) for r in rows)]
    if any(len(r) != len(header) for r in cells):
        raise ValueError("every row needs one cell per header column")
    if align is None:
        align = "l" * left + "r" * (len(header) - left)
    if len(align) != len(header) or set(align) - {"l", "r"}:
        raise ValueError(f"align={align!r}: one 'l' or 'r' per column")
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) if align[i] == "l" else c.rjust(w)
                  for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
        for r in cells)
