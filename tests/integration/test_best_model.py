"""Evaluation during training, the best model kept and early stopping
(evaluation.every, train.best_model, train.early_stopping) through the real
workflow: 2 ranks of the tiny model, the training alone (its
train_metrics.json as the target). With a learning rate too small to change
any prediction every evaluation ties the first, so the best is known: the
first evaluation's state."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from helpers import cards
from helpers.faults import RUN
from helpers.workflow import snakemake, tiny_experiment, write_config

TARGET = str(RUN / "train_metrics.json")
RULE_LOG = Path("logs/train_ddp/tiny/default.log")
FROZEN = 1e-9  # predictions never change: no evaluation gains on the first


def digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest() + str(tuple(tensor.shape))


def experiment(work: Path, model: Path, evaluation: dict, **train) -> Path:
    configfile = tiny_experiment(work, model, **train)  # 12 steps: 2 epochs of 6
    config = yaml.safe_load(configfile.read_text())
    config["evaluation"] = {"batch_size": 16, **evaluation}
    config["distributed"]["retries"] = 0  # a killed try stays failed, its checkpoints to look at
    return write_config(configfile, config)


def test_the_best_checkpoint_is_the_model_and_survives_a_kill(tmp_path, tiny_model_dir, monkeypatch):
    configfile = experiment(tmp_path, tiny_model_dir, {"every": 3}, learning_rate=FROZEN, checkpoint_every=0,
                            keep_checkpoints=1, best_model={"metric": "auto", "mode": "auto"})
    with monkeypatch.context() as patch:  # rank 1 dies once the evaluation at step 6 is checkpointed
        patch.setenv("CPUDDP_FAULT", "second-evaluation:1")
        assert snakemake(tmp_path, configfile, TARGET, check=False).returncode != 0
    checkpoints = tmp_path / RUN / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("step-*")) == ["step-00000003", "step-00000006"]
    assert json.loads((checkpoints / "step-00000003" / "COMPLETE").read_text())["is_best"] is True
    best = torch.load(checkpoints / "step-00000003" / "model.pt", weights_only=True)
    later = torch.load(checkpoints / "step-00000006" / "model.pt", weights_only=True)

    snakemake(tmp_path, configfile, TARGET)  # resumes at step 6 with the best so far
    metrics = json.loads((tmp_path / TARGET).read_text())
    evaluation = metrics["evaluation"]
    assert metrics["resumed_from_step"] == 6 and metrics["steps"] == 12
    assert [e["step"] for e in evaluation["history"]] == [3, 6, 9, 12]
    assert evaluation["metric"] == "f1" and evaluation["mode"] == "max"  # MRPC's main metric
    assert evaluation["best_step"] == 3 and evaluation["model_from_step"] == 3
    assert evaluation["best_value"] == evaluation["history"][0]["f1"]
    # By value: the checkpoint holds the weights under the names of the code that trained (cpuddp's encoder).
    saved = {digest(t) for t in load_file(tmp_path / RUN / "model" / "model.safetensors").values()}
    assert saved <= {digest(t) for t in best.values()}
    assert not saved <= {digest(t) for t in later.values()}  # not the later state
    run = cards.pairs(cards.load(tmp_path / RUN / "model").text, "Training run")  # the card says which step
    assert (run["model_from_step"], run["steps_trained"]) == ("3", "12")
    assert run["chosen_by"] == f"train.best_model: best f1 (max) {evaluation['best_value']}"
    log = (tmp_path / RULE_LOG).read_text()
    assert "the model is the best evaluated one: step-00000003" in log
    assert not checkpoints.exists()


def test_early_stopping_ends_the_training_after_patience_evaluations(tmp_path, tiny_model_dir):
    configfile = experiment(tmp_path, tiny_model_dir, {"every": 1}, learning_rate=FROZEN,
                            early_stopping={"patience": 2})
    snakemake(tmp_path, configfile, TARGET)
    metrics = json.loads((tmp_path / TARGET).read_text())
    evaluation = metrics["evaluation"]
    assert metrics["steps"] == 3  # best at 1, no gain at 2 and 3
    assert evaluation["stopped_early"] is True and evaluation["best_step"] == 1
    assert [e["step"] for e in evaluation["history"]] == [1, 2, 3]
    assert evaluation["model_from_step"] == 3  # no best_model: the last step's model
    # every rank's optimizer step flushes denormals: the one-pass kernel (bf16_master) or torch's threads (fp32)
    assert "optimizer denormals: flushed" in (tmp_path / RULE_LOG).read_text()
    assert "early stopping at step 3: 2 evaluations without a gain on f1" in (tmp_path / RULE_LOG).read_text()
