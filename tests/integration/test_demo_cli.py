"""Tests for workflow.scripts.data.demo (demo MRPC / SQuAD generators)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.demo_files import questions, read_tsv


REPO = Path(__file__).resolve().parents[2]
HEADER = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]


@pytest.mark.parametrize("task, files", [
    ("mrpc", ["train.tsv", "dev.tsv"]),
    ("squad", ["train-v1.1.json", "dev-v1.1.json"]),
    ("squad_v2", ["train-v2.0.json", "dev-v2.0.json"]),
])
def test_cli_writes_files(tmp_path, task, files):
    def run(out, hash_seed):  # a different PYTHONHASHSEED must not change the output
        cmd = [sys.executable, "-m", "workflow.scripts.data.demo", "--task", task, "--out", str(out),
               "--train", "40", "--dev", "12", "--seed", "5"]
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True)

    run(tmp_path, "1")
    run(tmp_path / "again", "2")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(files)
    assert all((tmp_path / f).read_bytes() == (tmp_path / "again" / f).read_bytes() for f in files)
    if task == "mrpc":
        assert len(read_tsv(tmp_path / "dev.tsv")) == 13
    else:
        assert len(list(questions(tmp_path / files[1]))) == 12
