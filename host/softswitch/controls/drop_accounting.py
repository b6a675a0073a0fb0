"""DropAccounting (``p4/v1model/include/control/drop_accounting.p4``): one count of
``ingress.drops[reason]`` per dropped frame."""

from __future__ import annotations

import numpy as np

from host.softswitch.controls.common import Counters, count


def account_drops(counters: Counters, reason: np.ndarray) -> None:
    """Count every non-zero drop reason of a batch."""
    dropped = reason[reason > 0]
    if dropped.size:
        count(counters.drops, dropped)
