"""``tests/support/jobs.py``: job indices are counted per network object, not per ``id()``."""

from __future__ import annotations

from tests.support import jobs


class _Net:
    """Just what ``new_job`` touches of an aggregation network."""

    def __init__(self) -> None:
        self.hosts = {}
        self.installed: list[int] = []

    def switch_ip(self, name: str) -> str:
        return "10.0.0.254"

    def install_job(self, switch: str, job) -> None:
        self.installed.append(job.index)

    def flush(self, name: str) -> None:
        pass


def test_a_new_network_starts_at_job_zero_even_where_python_reuses_an_old_ones_id():
    seen_ids: set[int] = set()
    for _ in range(200):   # CPython hands a freed object's address to the next one of its size
        net = _Net()
        reused = id(net) in seen_ids
        seen_ids.add(id(net))
        for _ in range(3):
            jobs.new_job(net, [])
        assert net.installed == [0, 1, 2], reused
        del net   # refcounting frees it here: no collection needed
    assert len(seen_ids) < 200   # the reuse really happened, so the check above meant something
