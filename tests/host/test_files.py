"""``host.files.write_atomic``: a reader polling a ready, state or statistics file sees the old
file or the whole new one, never an empty or half-written one (CI once read a switch's
``--ready-file`` empty: it was opened for writing in place)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from host import files


def test_the_file_appears_only_whole(tmp_path, monkeypatch):
    path = tmp_path / "ready"
    seen = []
    real = os.replace

    def replace(src, dst):
        # at the moment the file appears: it did not exist before, the text is complete
        seen.append((os.path.exists(dst), Path(src).read_text()))
        real(src, dst)

    monkeypatch.setattr(files.os, "replace", replace)
    files.write_atomic(path, "127.0.0.1:9559\n")
    assert seen == [(False, "127.0.0.1:9559\n")]
    assert path.read_text() == "127.0.0.1:9559\n"
    assert os.listdir(tmp_path) == ["ready"]          # no temporary file left


def test_a_replaced_file_is_read_old_or_new_by_a_reader_polling_it(tmp_path):
    path = tmp_path / "stats.json"
    files.write_atomic(path, "x" * 100_000)
    stop = threading.Event()
    bad: list[int] = []

    def reader() -> None:
        while not stop.is_set():
            n = len(path.read_text())
            if n not in (100_000, 200_000):
                bad.append(n)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(300):
            files.write_atomic(path, ("y" if i % 2 else "x") * (100_000 * (1 + i % 2)))
    finally:
        stop.set()
        t.join()
    assert bad == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    files.write_atomic(path, "old")

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        files.write_atomic(path, "new")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["state.json"]
