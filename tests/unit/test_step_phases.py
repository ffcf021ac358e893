"""The run's own split of an update (train/step_phases.py): what each phase
counts, the warm-up left out, and the fixed and per-token costs."""

import time

import pytest
import torch

from workflow.scripts.train.step_phases import PHASES, StepPhases, describe, real_tokens


def test_real_tokens_of_packed_and_padded_batches():
    assert real_tokens({"input_ids": torch.arange(37)}) == 37  # packed: real tokens only
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    assert real_tokens({"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": mask}) == 5
    assert real_tokens({"x": torch.ones(3, 4)}) == 0  # no tokens: features


def slow_loader(n: int, seconds: float, tokens: int):
    for _ in range(n):
        time.sleep(seconds)
        yield {"input_ids": torch.arange(tokens)}


def test_the_warm_up_is_left_out_and_the_loader_wait_is_data():
    phases = StepPhases(warmup=3)
    for batch in phases.batches(slow_loader(6, 0.02, 10)):
        phases.begin([batch])
        time.sleep(0.01)
        phases.lap("forward")
        phases.lap("backward", less=0.0)
        phases.lap("optimizer")
        phases.end()
    record = phases.record()
    assert record["updates"] == 3 and record["mean_tokens"] == 10
    assert set(record["phases"]) == set(PHASES)
    assert record["phases"]["data"] >= 0.02 and record["phases"]["forward"] >= 0.01
    assert sum(record["phases"].values()) == pytest.approx(record["update_seconds"], rel=1e-3, abs=1e-5)
    assert "fixed_seconds" not in record  # three updates of one length: no line


def test_exposed_all_reduce_is_taken_out_of_backward():
    phases = StepPhases(warmup=0)
    phases.begin([{"input_ids": torch.arange(4)}])
    time.sleep(0.03)
    phases.lap("backward", less=0.01)
    phases.end()
    split = phases.record()["phases"]
    assert split["allreduce_exposed"] == pytest.approx(0.01)
    assert split["backward"] >= 0.02


def test_fixed_and_per_token_costs_are_the_line_through_the_updates():
    phases = StepPhases(warmup=0)
    phases.points = [(tokens, 0.040 + 350e-6 * tokens) for tokens in (200, 300, 450, 600, 800, 1000, 1200, 1500)]
    phases.seconds["forward"] = sum(s for _, s in phases.points)
    record = phases.record()
    assert record["fixed_seconds"] == pytest.approx(0.040, abs=1e-6)
    assert record["per_token_seconds"] == pytest.approx(350e-6, rel=1e-6)
    line = describe(record)
    assert "fixed 40.0 ms an update + 350.0 us a real token" in line and "forward" in line


def test_no_timed_update_records_none():
    assert StepPhases(warmup=3).record() == {"updates": 0}
