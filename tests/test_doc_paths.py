"""Every repository path the README and the docs name in backticks exists.

A path is a backticked word that starts with a top-level folder of the repository (``host/``,
``p4/``, ...) or is a top-level file (``dev.sh``); in a folder's own ``README.md`` also a path
relative to that folder (``v1model/main.p4`` in ``p4/README.md``). ``<name>`` and ``*`` stand
for any name, ``{a,b}`` for each of its alternatives; ``::test`` and ``:line`` suffixes are
ignored. Paths of things the programs write (``.venv/``, absolute paths) are not checked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from host.paths import REPO

TOP_FOLDERS = ("host", "control_plane", "p4", "tests", "docs", "benchmarks", "tools", "mininet", ".ci")
TOP_FILES = ("README.md", "dev.sh", "setup.py", "pyproject.toml")


def documents(repo: Path = REPO) -> list[Path]:
    """The README, ``docs/*.md`` and each top-level folder's ``README.md``."""
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md")), *sorted(repo.glob("*/README.md"))]


def _words(text: str) -> Iterator[str]:
    for span in re.findall(r"`([^`\n]+)`", text):
        for word in span.split():
            word = word.strip("'\"()[],;:")
            word = re.sub(r"::.*$", "", word)            # pytest node ids
            word = re.sub(r":\d+(-\d+)?$", "", word)     # file:line
            if re.match(r"^[A-Za-z_]+=", word):          # VAR=path
                word = word.split("=", 1)[1]
            yield word.removeprefix("./")


def _expand(path: str) -> list[str]:
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [re.sub(r"<[^>]*>", "*", path).rstrip("/")]
    return [p for alt in m.group(1).split(",") for p in _expand(path[:m.start()] + alt + path[m.end():])]


def _exists(pattern: str, base: Path) -> bool:
    return any(base.glob(pattern)) if "*" in pattern else (base / pattern).exists()


def missing_paths(doc: Path, repo: Path = REPO) -> list[str]:
    """The backticked repository paths of ``doc`` that name nothing in ``repo``."""
    local = doc.parent if doc.parent != repo else None
    out = []
    for word in _words(doc.read_text()):
        if not word or word.startswith(("/", ".venv", "~", "http")):
            continue
        first = word.split("/", 1)[0]
        rooted = first in TOP_FOLDERS or word in TOP_FILES
        relative = local is not None and "/" in word and (local / first).exists()
        if not (rooted or relative):
            continue
        bases = [repo] + ([local] if local is not None else [])
        if not all(any(_exists(p, b) for b in bases) for p in _expand(word)):
            out.append(word)
    return out


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_backticked_repository_path_exists(doc):
    assert missing_paths(doc) == [], f"{doc.relative_to(REPO)} names paths that do not exist"


def test_the_check_sees_stale_paths(tmp_path):
    (tmp_path / "host" / "thc").mkdir(parents=True)
    (tmp_path / "host" / "thc" / "codec.py").write_text("")
    (tmp_path / "p4" / "v1model").mkdir(parents=True)
    (tmp_path / "p4" / "v1model" / "main.p4").write_text("")
    (tmp_path / "dev.sh").write_text("")
    (tmp_path / "README.md").write_text(
        "`host/thc/codec.py` `host/thc/gone.py` `./dev.sh` `netco demo` `host/{thc,nope}/codec.py` "
        "`host/<pkg>/codec.py` `tests/x.py::test_a` `.venv/bin/netco` `PYTHONPATH=. python benchmarks/b.py`")
    (tmp_path / "p4" / "README.md").write_text("`v1model/main.p4` `v1model/size.p4` `build.py`")
    assert missing_paths(tmp_path / "README.md", tmp_path) == [
        "host/thc/gone.py", "host/{thc,nope}/codec.py", "tests/x.py", "benchmarks/b.py"]
    assert missing_paths(tmp_path / "p4" / "README.md", tmp_path) == ["v1model/size.p4"]
