"""bench.step_profile --trainer: the Trainer's whole steps, timed and then
profiled in its own process (bench/hf_trainer_run.py --profile-steps), on a
tiny model and data of MRPC's real lengths."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers.workflow import REPO


def test_the_trainer_times_and_profiles_its_whole_steps(tmp_path, tiny_model_dir):
    sys.path.insert(0, str(REPO))
    from bench import train_bench

    data, out, steps = train_bench.prepare(tmp_path, str(tiny_model_dir), n_train=200, n_dev=20), tmp_path / "out", 3
    done = subprocess.run(
        [sys.executable, str(REPO / "bench/hf_trainer_run.py"), "--model", str(tiny_model_dir), "--data", str(data),
         "--out", str(out), "--pad", "batch", "--group-by-length", "--one-process", "--batch-size", "8",
         "--profile-steps", str(steps), "--steps", str(3 + 2 * steps + 1)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    profiled = json.loads((out / "rank0.json").read_text())["profile"]
    assert len(profiled["whole_step_seconds"]) == steps and min(profiled["whole_step_seconds"]) > 0
    assert len(profiled["every_step_seconds"]) == 3 + 2 * steps
    assert 0 < profiled["matmul_share"] < 1 and profiled["matmul_gflop_per_step"] > 0 and len(profiled["top"]) == 8
    # the batches of the timed steps: padded and real tokens, long to short (length-grouped)
    timed = profiled["timed_tokens"]
    assert len(timed) == steps and all(0 < real <= padded for padded, real in timed)
    assert [real for _, real in timed] == sorted((real for _, real in timed), reverse=True)


def test_too_few_steps_for_the_profile_is_one_line(tmp_path, tiny_model_dir):
    sys.path.insert(0, str(REPO))
    from bench import train_bench

    data = train_bench.prepare(tmp_path, str(tiny_model_dir), n_train=100, n_dev=10)
    done = subprocess.run(
        [sys.executable, str(REPO / "bench/hf_trainer_run.py"), "--model", str(tiny_model_dir), "--data", str(data),
         "--out", str(tmp_path / "out"), "--pad", "batch", "--one-process", "--batch-size", "8",
         "--profile-steps", "3", "--steps", "4"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == "--profile-steps 3 needs --steps 10 or more"
