"""Evaluation during training (train/evaluation.py): which metric and mode
decide the best model, what counts as a gain, what one evaluation records,
and which checkpoints pruning keeps."""

from __future__ import annotations

import json

import pytest

from workflow.scripts.common import tasks
from workflow.scripts.common.errors import UserError
from workflow.scripts.settings.views import BestModel, TrainView
from workflow.scripts.train import checkpoint
from workflow.scripts.train.evaluation import Evaluator, choose, gains, record
from workflow.scripts.train.state import Progress

AUTO = BestModel(metric="auto", mode="auto")


@pytest.mark.parametrize("task, metric", [("mrpc", "f1"), ("qqp", "f1"), ("cola", "matthews_correlation"),
                                          ("stsb", "pearson"), ("squad", "f1"), ("squad_v2", "f1"),
                                          ("sst2", "accuracy"), ("mnli", "accuracy"), ("rte", "accuracy")])
def test_auto_is_the_task_main_metric_and_higher_is_better(task, metric):
    assert choose(tasks.get_task(task), AUTO) == (metric, "max")
    assert choose(tasks.get_task(task), None) == (metric, "max")  # early stopping without best_model


def test_evaluation_metric_leads_auto_and_errors_are_minimised():
    mrpc = tasks.get_task("mrpc")
    assert choose(tasks.with_labels(mrpc, mrpc.label_names, "accuracy"), AUTO) == ("accuracy", "max")
    regression = tasks.get_task("regression")
    assert choose(regression, BestModel(metric="mse", mode="auto")) == ("mse", "min")
    assert choose(regression, BestModel(metric="pearson", mode="min")) == ("pearson", "min")
    assert choose(tasks.get_task("mnli"), BestModel(metric="accuracy_mm", mode="auto")) == ("accuracy_mm", "max")


def test_a_metric_the_task_lacks_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"train.best_model.metric 'pearson' is not a metric of task mrpc: "
                                        r"use auto or one of f1, accuracy$"):
        choose(tasks.get_task("mrpc"), BestModel(metric="pearson", mode="auto"))


def test_gains_ties_and_nan():
    assert gains(0.5, None, "max") and not gains(float("nan"), None, "max")
    assert gains(0.6, {"value": 0.5}, "max") and not gains(0.5, {"value": 0.5}, "max")
    assert gains(0.4, {"value": 0.5}, "min") and not gains(0.6, {"value": 0.5}, "min")


def test_record_keeps_the_best_and_counts_evaluations_without_a_gain():
    progress = Progress()
    for step, f1 in ((3, 0.5), (6, 0.7), (9, 0.7), (12, 0.6)):
        progress.step = step
        record(progress, {"f1": f1, "accuracy": 0.1}, "f1", "max", patience=2)
    assert progress.best == {"step": 6, "metric": "f1", "value": 0.7}
    assert progress.stale == 2 and progress.stopped_early
    assert [e["step"] for e in progress.evaluations] == [3, 6, 9, 12]


def test_the_best_so_far_is_part_of_a_checkpoint_and_resumes():
    progress = Progress(step=6, evaluations=[{"step": 3, "f1": 0.5}], best={"step": 3, "metric": "f1",
                                                                           "value": 0.5}, stale=1)
    resumed = Progress()
    resumed.load_state_dict(json.loads(json.dumps(progress.state_dict())))  # as the marker holds it
    assert (resumed.best, resumed.stale, resumed.evaluations) == (progress.best, 1, progress.evaluations)
    old = {k: v for k, v in progress.state_dict().items() if k not in Progress.EVALUATED}  # an older cpuddp's
    resumed.load_state_dict(old)
    assert resumed.best is None and resumed.evaluations == [] and not resumed.stopped_early


def test_pruning_never_removes_the_best_checkpoint(tmp_path):
    best = {"step": 3, "metric": "f1", "value": 0.5}
    for step in (3, 6, 9):
        checkpoint.save(tmp_path, step, {"model": {}}, {"best": best}, keep=1, best_step=3)
    assert checkpoint.info(checkpoint.valid(tmp_path)[-1])["best"] == best  # what a resume reads back
    assert [p.name for p in checkpoint.valid(tmp_path)] == ["step-00000003", "step-00000009"]
    assert [checkpoint.info(p)["is_best"] for p in checkpoint.valid(tmp_path)] == [True, False]
    checkpoint.save(tmp_path, 12, {"model": {}}, {}, keep=1, best_step=12)  # a new best: the old one goes
    assert [p.name for p in checkpoint.valid(tmp_path)] == ["step-00000012"]


def test_best_model_without_evaluation_is_refused_in_one_line():
    cfg = TrainView.of({"task": "mrpc", "model": "m", "train": {"best_model": {}}})
    with pytest.raises(UserError, match="need evaluation during training: set evaluation.every"):
        Evaluator(cfg, "unused", None, 0, 0, None)
    off = Evaluator(TrainView.of({"task": "mrpc", "model": "m"}), "unused", None, 0, 0, None)
    assert not off.enabled and not off.due(10) and off.summary(Progress()) is None


def test_the_config_check_refuses_best_model_without_evaluation_and_a_bad_every():
    from workflow.scripts.settings.config import ConfigError, validate

    base = {"task": "mrpc", "model": "m"}
    with pytest.raises(ConfigError, match=r"^config error: train.best_model and train.early_stopping need "
                                          r"evaluation during training: set evaluation.every"):
        validate({**base, "train": {"best_model": {}, "early_stopping": {"patience": 2}}})
    with pytest.raises(ConfigError, match="evaluation.every"):
        validate({**base, "evaluation": {"every": "Epoch"}})
    done = validate({**base, "evaluation": {"every": "epoch"}, "train": {"best_model": {}}})
    assert done["train"]["best_model"] == {"metric": "auto", "mode": "auto"}
    assert validate(base)["train"]["best_model"] is None and validate(base)["evaluation"]["every"] is None


def test_every_n_steps_or_at_epoch_ends_never_both():
    steps = Evaluator.off()
    steps.every = 3
    assert [s for s in range(1, 13) if steps.due(s)] == [3, 6, 9, 12] and not steps.due(6, epoch_end=True)
    epochs = Evaluator.off()
    epochs.every = "epoch"
    assert not any(epochs.due(s) for s in range(1, 13)) and epochs.due(6, epoch_end=True)
