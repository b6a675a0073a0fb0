"""``host.training.names``: the task names a parser lists without torch (issue 36) are the
tasks :func:`host.training.tasks.make_task` builds, each under its own name."""

from __future__ import annotations

import pytest

from host.training.names import TASK_NAMES
from host.training.tasks import TASKS, make_task


def test_every_name_has_a_task_and_no_task_is_unnamed() -> None:
    assert tuple(TASKS) == TASK_NAMES


@pytest.mark.parametrize("name", TASK_NAMES)
def test_each_name_builds_its_own_task(name) -> None:
    assert make_task(name).name == name
