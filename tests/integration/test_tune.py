"""Ranks versus threads tuning: layouts and a real tuning run of the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.workflow import snakemake
from helpers.workflow import tiny_experiment
from workflow.scripts.settings import layout
from workflow.scripts.train import tune


def test_layouts_split_the_cores():
    assert layout.layouts(1) == [(1, 1)]
    assert layout.layouts(4) == [(1, 4), (2, 2), (4, 1)]
    assert layout.layouts(6) == [(1, 6), (2, 3), (3, 2), (6, 1)]


def test_burst_config_overrides_layout_split_and_steps():
    config = {"distributed": {"nodes": 2, "hostfile": "h", "processes_per_node": 4, "threads_per_process": "auto"},
              "train": {"max_steps": None, "checkpoint_every": 100, "log_every": 10, "batch_size": 16, "epochs": 3}}
    row = {"processes_per_node": 2, "threads_per_process": 3, "batch_size": 8, "gradient_accumulation_steps": 1}
    burst = tune.burst_config(config, row, 8)
    assert burst["distributed"] == {"nodes": 1, "hostfile": None, "processes_per_node": 2, "threads_per_process": 3}
    assert burst["train"]["batch_size"] == 8 and burst["train"]["gradient_accumulation_steps"] == 1
    # one epoch: the warm-up, then 8 updates sampled across its lengths, whatever the run's epochs
    assert burst["train"]["sample_updates"] == 8 and burst["train"]["epochs"] == 1
    assert burst["train"]["max_steps"] is None and burst["train"]["checkpoint_every"] == 0
    assert config["distributed"]["processes_per_node"] == 4 and config["train"]["batch_size"] == 16  # untouched


def test_tune_target_measures_every_layout(tmp_path, tiny_model_dir):
    configfile = tiny_experiment(tmp_path, tiny_model_dir)
    snakemake(tmp_path, configfile, "tune")
    result = json.loads((tmp_path / "results/tiny/tune/layout.json").read_text())
    layouts = [(r["processes_per_node"], r["threads_per_process"]) for r in result["table"]]
    assert layouts == layout.layouts(result["cores"])
    assert all(r["train_samples_per_second"] > 0 for r in result["table"])
    best = max(result["table"], key=lambda r: r["train_samples_per_second"])
    assert result["best"] == {k: best[k] for k in ("processes_per_node", "threads_per_process", "batch_size",
                                                   "gradient_accumulation_steps")}
    assert not (tmp_path / "results/tiny/tune/bursts").exists()  # each burst's saved model is gone
    cached = json.loads(Path(result["cache_file"]).read_text())  # what processes_per_node auto then uses
    assert cached["table"] == result["table"] and result["cached"] is False
    assert result["steps"] == tune.TUNE_STEPS and cached["timing"] == layout.TIMING
