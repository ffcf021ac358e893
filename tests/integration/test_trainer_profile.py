"""bench.step_profile --trainer: the Trainer's whole steps, timed and then
profiled in its own process (bench/hf_trainer_run.py --profile-steps), on a
tiny model and data of MRPC's real lengths."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench import train_bench
from helpers.workflow import REPO


def run_trainer(work, model, rows: int, *flags: str) -> subprocess.CompletedProcess:
    data = train_bench.prepare(work, str(model), n_train=rows, n_dev=rows // 10)
    return subprocess.run(
        [sys.executable, str(REPO / "bench/hf_trainer_run.py"), "--model", str(model), "--data", str(data),
         "--out", str(work / "out"), "--pad", "batch", "--one-process", "--batch-size", "8", *flags],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600)


def test_the_trainer_times_and_profiles_its_whole_steps(tmp_path, tiny_model_dir):
    steps = 3
    done = run_trainer(tmp_path, tiny_model_dir, 200, "--group-by-length", "--profile-steps", str(steps),
                       "--steps", str(3 + 2 * steps + 1))
    assert done.returncode == 0, done.stderr[-2000:]
    profiled = json.loads((tmp_path / "out/rank0.json").read_text())["profile"]
    assert len(profiled["whole_step_seconds"]) == steps and min(profiled["whole_step_seconds"]) > 0
    assert len(profiled["every_step_seconds"]) == 3 + 2 * steps
    assert 0 < profiled["matmul_share"] < 1 and profiled["matmul_gflop_per_step"] > 0 and len(profiled["top"]) == 8
    # the batches of the timed steps: padded and real tokens, long to short (length-grouped)
    timed = profiled["timed_tokens"]
    assert len(timed) == steps and all(0 < real <= padded for padded, real in timed)
    assert [real for _, real in timed] == sorted((real for _, real in timed), reverse=True)


def test_too_few_steps_for_the_profile_is_one_line(tmp_path, tiny_model_dir):
    done = run_trainer(tmp_path, tiny_model_dir, 100, "--profile-steps", "3", "--steps", "4")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == "--profile-steps 3 needs --steps 10 or more"
