"""bench/results/README.md indexes every raw result file beside it: a file
it does not name is a measurement no page leads to. The folder is
gitignored (results are added with `git add -f`), so the files on disk are
what a clone holds; read with pathlib, as unit tests start no processes."""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
INDEX = RESULTS / "README.md"
FILE_NAME = re.compile(r"^[\w.-]+\.(?:txt|json)$")


def result_files() -> list[str]:
    """The folder's files but the index itself and dotfiles (__pycache__ is a folder)."""
    return sorted(p.name for p in RESULTS.iterdir()
                  if p.is_file() and p != INDEX and not p.name.startswith("."))


def named() -> set[str]:
    """The index's backquoted words: a file is named in full, not by a suffix."""
    return set(re.findall(r"`([^`]+)`", INDEX.read_text()))


def test_the_index_names_every_result_file():
    assert [name for name in result_files() if name not in named()] == []


def test_every_file_the_index_names_exists():
    assert sorted(name for name in named() if FILE_NAME.match(name) and not (RESULTS / name).is_file()) == []
