"""The training tasks' names (``netco train --task``), without torch: a parser lists them
before any task is built (``netco train --help`` in a fraction of a second, issue 36).
:data:`host.training.tasks.TASKS` gives each its class, in this order."""

from __future__ import annotations

TASK_NAMES = ("digits", "digits-wide", "charlm", "charlm-ngram")
