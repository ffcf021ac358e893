"""processes_per_node auto keeps the recipe: every candidate layout trains
the global batch of the reference layout (one rank per node), split into
its ranks (settings/layout.py); the cache key holds everything that moves a
step; a layout too large for the memory is not measured
(train/layout_memory.py); a burst's rate leaves out its warm-up steps
(train/loop.py); the ranks train the split the environment check recorded."""

from __future__ import annotations

import json
import time

import pytest

from workflow.scripts.settings import layout
from workflow.scripts.settings.decisions import RunDecisions
from workflow.scripts.settings.views import TrainSettings
from workflow.scripts.train import layout_memory, loop
from workflow.scripts.train.evaluation import Evaluator
from workflow.scripts.train.state import Progress


@pytest.mark.parametrize("batch, accumulation, ranks, split", [
    (16, 1, 1, (16, 1)), (16, 1, 2, (8, 1)), (16, 2, 4, (4, 2)), (6, 4, 4, (1, 6)), (2, 8, 4, (1, 4)),
    (16, 1, 3, None), (16, 1, 32, None),
])
def test_a_layouts_split_keeps_the_reference_global_batch(batch, accumulation, ranks, split):
    assert layout.split_batch(batch, accumulation, ranks) == split
    if split:
        assert split[0] * ranks * split[1] == batch * accumulation  # the global batch of one rank per node


def test_candidates_are_the_splits_of_the_cores_that_keep_the_global_batch():
    rows, dropped = layout.candidates(12, 8, 1)
    assert [(r["processes_per_node"], r["threads_per_process"]) for r in rows] == [(1, 12), (2, 6), (4, 3)]
    assert {r["batch_size"] * r["processes_per_node"] * r["gradient_accumulation_steps"] for r in rows} == {8}
    assert dropped == [f"{r} x {12 // r}: batch 8 x accumulation 1 does not split into {r} equal shares; not measured"
                       for r in (3, 6, 12)]
    rows, dropped = layout.candidates(4, 2, 2)  # beyond the batch, accumulation shrinks to keep it
    assert [(r["batch_size"], r["gradient_accumulation_steps"]) for r in rows] == [(2, 2), (1, 2), (1, 1)]
    assert not dropped


def test_the_fallback_is_one_rank_of_every_core_at_the_batch_as_set():
    assert layout.fallback(8, 16, 2) == {"processes_per_node": 1, "threads_per_process": 8, "batch_size": 16,
                                         "gradient_accumulation_steps": 2}


def run(**changes) -> dict:
    train = {"batch_size": 8, "max_seq_length": 64, "precision": "fp32", "gradient_accumulation_steps": 1}
    dist = {"backend": "gloo", "bucket_cap_mb": 25, "gradient_compression": "none"}
    for key, value in changes.items():
        (train if key in train else dist)[key] = value
    return {"task": "mrpc", "model": "m", "train": train, "distributed": dist}


def test_the_cache_key_moves_with_everything_that_moves_a_step():
    lengths = layout.length_profile([10, 20, 30, 40])
    key = layout.cache_key("CPU", 8, layout.shape(run(), lengths))
    others = [layout.cache_key("CPU", 8, layout.shape(run(**change), lengths)) for change in (
        {"backend": "ccl"}, {"bucket_cap_mb": 100}, {"gradient_compression": "bf16"},
        {"gradient_accumulation_steps": 2}, {"max_seq_length": 128}, {"precision": "bf16"})]
    others += [layout.cache_key("CPU", 8, layout.shape(run(), layout.length_profile([10, 20, 30, 120]))),
               layout.cache_key("CPU", 16, layout.shape(run(), lengths)),
               layout.cache_key("Other CPU", 8, layout.shape(run(), lengths))]
    assert key not in others and len(set(others)) == len(others)
    assert key == layout.cache_key("CPU", 8, layout.shape(run(), layout.length_profile([40, 30, 20, 10])))


def test_the_length_profile_is_the_mean_and_percentiles_of_the_token_lengths():
    assert layout.length_profile(list(range(1, 101))) == {"mean": 50.5, "p10": 11, "p50": 51, "p90": 91, "max": 100}


def model_folder(tmp_path, parameters: int):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2,
                                                      "num_attention_heads": 2}))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * (4 * parameters))
    return tmp_path


def test_a_layout_whose_memory_estimate_exceeds_the_available_is_not_measured(tmp_path):
    folder = model_folder(tmp_path, 1000)
    one = layout_memory.need(folder, 8, 32, 1)
    activations = 2 * 2 * 32 * 8 * 64 * (34 + 5 * 2 * 32 / 64)
    assert one == 1000 * 20 + activations + layout_memory.RANK_OVERHEAD
    assert layout_memory.need(folder, 8, 32, 4) == 4 * one
    row = {"processes_per_node": 4, "threads_per_process": 1, "batch_size": 8}
    assert layout_memory.too_big(folder, row, 32, available=4 * one) is None
    why = layout_memory.too_big(folder, row, 32, available=3 * one)
    assert why.startswith("4 x 1: an estimated 2.0 GiB (4 rank(s) of the model") and why.endswith("not measured")
    assert layout_memory.need(tmp_path / "absent", 8, 32, 4) is None  # no folder: not checked


def test_a_burst_is_timed_after_its_warm_up_steps():
    progress, evaluator = Progress(), Evaluator.off()
    for step in range(1, 4 + loop.WARMUP_STEPS):
        time.sleep(0.5 if step == 1 else 0.01)  # a slow first step, left out
        progress.samples += 10
        loop.mark_warm(progress, step, evaluator)
    rate = loop.steady_rate(progress, evaluator)
    # 3 steps of 10 samples in about 0.03 s; with the first step counted 60 samples in 0.53 s or more (113/s)
    assert 120 < rate < 30 / 0.03 + 1
    assert loop.steady_rate(Progress(), evaluator) is None  # no step after the warm-up


def test_the_ranks_train_the_split_the_environment_check_recorded():
    train = TrainSettings.of({"batch_size": 16, "gradient_accumulation_steps": 1})
    decisions = RunDecisions.of({"backend": "gloo", "precision": "fp32", "threads_per_process": 1,
                                 "processes_per_node": 2, "batch_size_per_rank": 8,
                                 "gradient_accumulation_steps": 1})
    split = decisions.recipe(train)
    assert (split.batch_size, split.gradient_accumulation_steps) == (8, 1)
    set_by_hand = RunDecisions.of({"backend": "gloo", "precision": "fp32", "threads_per_process": 1})
    assert set_by_hand.recipe(train) is train
