"""A program started as `python -m workflow.scripts...` reads transformers'
models table from the cache (common/import_table.py): the first one writes
it, the next reads it, unchanged (that the table is transformers' own:
tests/unit/test_import_table.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers.workflow import REPO

RANK_HELP = ["-m", "workflow.scripts.train.rank", "--help"]  # a rank: imports transformers before its arguments


def run(cache, argv: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_the_first_program_writes_the_table_and_the_next_reads_it(tmp_path):
    first = run(tmp_path, RANK_HELP)
    assert first.returncode == 0 and "--config" in first.stdout, first.stderr
    tables = list((tmp_path / "cpuddp" / "transformers-import-table").iterdir())
    assert [t.suffix for t in tables] == [".pickle"], tables
    written = tables[0].stat().st_mtime_ns
    second = run(tmp_path, RANK_HELP)
    assert second.returncode == 0 and second.stdout == first.stdout, second.stderr
    assert tables[0].stat().st_mtime_ns == written  # read, not built again


def test_a_program_started_otherwise_builds_the_table_as_transformers_does(tmp_path):
    done = run(tmp_path, ["-c", "import workflow.scripts, transformers; transformers.BertConfig"])
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "cpuddp").exists()
