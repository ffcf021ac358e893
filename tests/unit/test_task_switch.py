"""Switching tasks by configuration alone: the results folder follows the
task, tokenization lengths default per task (run_glue, run_qa), a stride the
tokenizer would refuse stops at the config check."""

from __future__ import annotations

import pytest
import yaml

from helpers.workflow import REPO
from workflow.scripts.settings import config as cfg

DEFAULT = yaml.safe_load((REPO / "config.yaml").read_text())


def switched(**overrides) -> dict:
    """config.yaml with command-line overrides (as Snakemake merges --config)."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for key, value in overrides.items():
        if isinstance(value, dict):
            config[key] = {**(config.get(key) or {}), **value}
        else:
            config[key] = value
    return cfg.validate(config)


@pytest.mark.parametrize("task", ["cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli",
                                  "squad", "squad_v2"])
def test_the_folder_follows_the_task(task):
    assert switched(task=task)["experiment"] == task


def test_a_named_experiment_wins():
    assert switched(task="qnli", experiment="mine")["experiment"] == "mine"


@pytest.mark.parametrize("task, length, stride", [("mrpc", 128, 128), ("qnli", 128, 128),
                                                  ("squad", 384, 128), ("squad_v2", 384, 128)])
def test_lengths_default_per_task_as_run_glue_and_run_qa(task, length, stride):
    train = switched(task=task)["train"]
    assert (train["max_seq_length"], train["doc_stride"]) == (length, stride)


def test_an_explicit_length_wins():
    train = switched(task="squad", train={"max_seq_length": 256, "doc_stride": 64})["train"]
    assert (train["max_seq_length"], train["doc_stride"]) == (256, 64)


@pytest.mark.parametrize("length, stride", [(128, 128), (192, 128), (384, 320)])
def test_a_stride_the_tokenizer_refuses_names_both_keys(length, stride):
    with pytest.raises(cfg.ConfigError) as err:
        switched(task="squad", train={"max_seq_length": length, "doc_stride": stride})
    message = str(err.value)
    assert "\n" not in message
    assert f"train.doc_stride {stride}" in message and f"train.max_seq_length {length}" in message


def test_the_stride_check_matches_the_tokenizer(minilm_dir):
    """The pair the issue saw fail inside the tokenizer is refused; run_qa's passes it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    question, context = "what is the name of the town where it began?", "word " * 600
    with pytest.raises(Exception, match="stride"):
        tokenizer(question, context, truncation="only_second", max_length=128, stride=128,
                  return_overflowing_tokens=True)
    tokenizer(question, context, truncation="only_second", max_length=384, stride=128,
              return_overflowing_tokens=True)
    with pytest.raises(cfg.ConfigError):
        switched(task="squad", train={"max_seq_length": 128})
