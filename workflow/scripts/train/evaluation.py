"""Evaluation during training (evaluation.every), the best model kept
(train.best_model) and early stopping (train.early_stopping), as the
Trainer's eval_strategy, load_best_model_at_end and EarlyStoppingCallback.

Rank 0 scores the model on the validation splits with the code that
evaluate_fp32 uses (data/scoring.py) while the other ranks wait in the
broadcast of its metrics (a collective: it must end within
distributed.timeout_minutes); every rank then records the same result in
Progress, which checkpoints keep, so the best so far, the evaluations
without a gain and the history survive a resume. With best_model a
checkpoint is written at each evaluation and the best one is never pruned;
rank.py loads it into the model before saving.
"""

from __future__ import annotations

import math
import time

import torch.distributed as dist

from workflow.scripts.common import tasks
from workflow.scripts.common.errors import UserError
from workflow.scripts.common.modeling import accepted_columns
from workflow.scripts.data.arrow_split import load_splits
from workflow.scripts.data.batching import PAD_KEYS
from workflow.scripts.data.scoring import score
from workflow.scripts.settings.views import BestModel, TrainView
from workflow.scripts.train import fault_point, tracking

LOWER_IS_BETTER = ("mse", "loss")  # metric names (or their ends) where less is better


def metric_names(task: tasks.Task) -> list[str]:
    """The metrics a validation pass gives: the task's, and mnli's mismatched ones with _mm."""
    return [f"{m}{'_mm' if i else ''}" for i in range(len(task.validation_splits)) for m in task.metrics]


def choose(task: tasks.Task, best: BestModel | None) -> tuple[str, str]:
    """(metric, mode) that decide the best evaluation: auto = the task's main
    metric (f1 for MRPC, QQP and SQuAD, matthews_correlation for CoLA, pearson
    for STS-B, accuracy for the other GLUE tasks; evaluation.metric if set);
    mode auto = min for losses and errors, else max."""
    metric = task.main_metric if best is None or best.metric == "auto" else best.metric
    if metric not in metric_names(task):
        raise UserError(f"train.best_model.metric {metric!r} is not a metric of task {task.name}: use auto or "
                        f"one of {', '.join(metric_names(task))}")
    mode = best.mode if best is not None and best.mode != "auto" else None
    return metric, mode or ("min" if metric.split("_")[-1] in LOWER_IS_BETTER else "max")


def gains(value: float, best: dict | None, mode: str) -> bool:
    """Whether `value` beats the best so far (a NaN never does)."""
    if value is None or math.isnan(value):
        return False
    if best is None:
        return True
    return value < best["value"] if mode == "min" else value > best["value"]


def record(progress, metrics: dict, metric: str, mode: str, patience: int | None) -> bool:
    """Add one evaluation to `progress`: history, best so far, evaluations
    without a gain, and whether early stopping ends the training. True if it
    is the new best."""
    progress.evaluations.append({"step": progress.step, "epoch": progress.epoch, **metrics})
    value = metrics.get(metric)
    gained = gains(value, progress.best, mode)
    if gained:
        progress.best, progress.stale = {"step": progress.step, "metric": metric, "value": value}, 0
    else:
        progress.stale += 1
    progress.stopped_early = bool(patience) and progress.stale >= patience
    return gained


def log_metrics(step: int, metrics: dict) -> None:
    """Every evaluation's metrics to the trackers (report.trackers, train/tracking.py)."""
    tracking.log_metrics(step, metrics)


class Evaluator:
    """Evaluation during training of one rank: when, with what, and what it records."""
    every, keep_best, patience, seconds = None, False, None, 0.0  # as off() has them

    @classmethod
    def off(cls) -> Evaluator:
        """No evaluation during training (evaluation.every null)."""
        return cls.__new__(cls)

    def __init__(self, cfg: TrainView, data_dir: str, raw_dir: str | None, pad_id: int, rank: int, log):
        self.every, self.settings = cfg.evaluation.every, cfg.evaluation
        self.keep_best = cfg.train.best_model is not None
        self.patience = cfg.train.early_stopping.patience if cfg.train.early_stopping else None
        self.rank, self.log, self.raw_dir, self.pad_id, self.seconds = rank, log, raw_dir, pad_id, 0.0
        if self.every is None:
            if self.keep_best or self.patience:
                raise UserError("train.best_model and train.early_stopping need evaluation during training: "
                                "set evaluation.every (epoch or a number of steps)")
            return
        self.data = load_splits(data_dir)
        self.task = tasks.for_data(cfg.task, self.data["train"].features, cfg.evaluation.metric)
        self.metric, self.mode = choose(self.task, cfg.train.best_model)
        if self.task.is_qa and not raw_dir:
            raise UserError("evaluation.every on a QA task needs the raw data: pass --raw to train.rank")

    @property
    def enabled(self) -> bool:
        return self.every is not None

    def due(self, step: int, epoch_end: bool = False) -> bool:
        """Whether to evaluate after update `step` (in the loop) or at an epoch's end (epoch_end)."""
        if self.every is None:
            return False
        return epoch_end if self.every == "epoch" else not epoch_end and step % self.every == 0

    def line(self) -> str:
        """What the run does, for the log."""
        if not self.enabled:
            return "evaluation during training: off (evaluation.every null)"
        stop = f"; early stopping after {self.patience} without a gain" if self.patience else ""
        keep = "; the best one is the model" if self.keep_best else "; the last step's model is the model"
        return f"evaluation during training: every {self.every}, by {self.metric} ({self.mode}){keep}{stop}"

    def validation(self, model) -> dict:
        """The validation splits, with only the inputs the model's forward takes."""
        drop = [c for c in PAD_KEYS if c not in accepted_columns(model, PAD_KEYS)]
        return {s: self.data[s].select_columns([c for c in self.data[s].column_names if c not in drop])
                for s in self.task.validation_splits}

    def scores(self, t) -> dict:
        """Rank 0: the task's metrics of the model as it is now."""
        t.model.eval()
        try:
            metrics, _, _, _ = score(self.task, t.model, self.validation(t.model), self.raw_dir, self.settings,
                                     self.pad_id, t.autocast)
        finally:
            t.model.train()
        return {k: round(float(v), 6) for k, v in metrics.items()}

    def run(self, t, progress, checkpoints) -> bool:
        """Evaluate (a collective), record, checkpoint with best_model; True to stop early."""
        start = time.perf_counter()
        try:
            result = [self.scores(t) if self.rank == 0 else None]
        except Exception as err:  # every rank learns of it, rather than waiting out the timeout
            result = [f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"]
        dist.broadcast_object_list(result)  # the other ranks wait here for rank 0's metrics
        if isinstance(result[0], str):
            raise UserError(f"evaluation during training failed on rank 0 at step {progress.step}: {result[0]}; "
                            "set evaluation.every null to train without it")
        gained = record(progress, result[0], self.metric, self.mode, self.patience)
        self.log.info(f"evaluation at step {progress.step}: " + ", ".join(f"{k} {v:.4f}" for k, v in
                      result[0].items()) + (" (best so far)" if gained else
                                            f" ({progress.stale} without a gain on {self.metric})"))
        if self.rank == 0:
            log_metrics(progress.step, {f"eval/{k}": v for k, v in result[0].items()})
        self.seconds += time.perf_counter() - start
        if self.keep_best:
            checkpoints.save(t, progress)
        if len(progress.evaluations) == 2:
            fault_point.reach("second-evaluation", self.rank)
        if progress.stopped_early:
            self.log.info(f"early stopping at step {progress.step}: {progress.stale} evaluations without a gain "
                          f"on {self.metric}, best {progress.best['value']:.4f} at step {progress.best['step']}")
        return progress.stopped_early

    def finish(self, t, progress, checkpoints) -> None:
        """Evaluate the last step's model too, unless it just was."""
        if self.enabled and (not progress.evaluations or progress.evaluations[-1]["step"] != progress.step):
            self.run(t, progress, checkpoints)

    def summary(self, progress) -> dict | None:
        """train_metrics.json's `evaluation`: which step won, its metric, every evaluation."""
        if not self.enabled:
            return None
        best = progress.best or {}
        return {"every": self.every, "metric": self.metric, "mode": self.mode,
                "best_step": best.get("step"), "best_value": best.get("value"),
                "model_from_step": best.get("step") if self.keep_best and best else progress.step,
                "early_stopping_patience": self.patience, "stopped_early": progress.stopped_early,
                "seconds": round(self.seconds, 3), "history": progress.evaluations}
