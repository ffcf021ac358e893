"""Experiment tracking on rank 0 (report.trackers, as the Trainer's report_to):
TensorBoard, MLflow and W&B behind one interface.

    with tracking.opened(cfg.report, run_dir, params, log, main=env.is_main):
        ...  # the loop calls log_step; evaluation calls log_metrics

Each tracker is one small class with `params` (once), `metrics` (every
log_every steps, each evaluation) and `close`; `Trackers` calls them all and
drops one that fails with a single warning line, so that a tracker that
cannot be reached never fails a training. The open trackers are this
process's (`_active`): the loop and the evaluation call the module's
functions and need no handle; on every rank but 0 they do nothing.
<run>/tracking.json records what was opened (common/tracked.py).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from workflow.scripts.common.atomic import read_json, write_json
from workflow.scripts.common.tracked import one_line, record_path
from workflow.scripts.settings.decisions import RunDecisions
from workflow.scripts.settings.views import ReportSettings, TrainView
from workflow.scripts.train.tracking_mlflow import MLflowTracker


class TensorBoardTracker:
    """Event files in <run>/tracking/tensorboard (torch's SummaryWriter)."""
    name = "tensorboard"

    def __init__(self, run_dir: Path, previous: dict, settings: ReportSettings):
        from torch.utils.tensorboard import SummaryWriter

        self.folder = run_dir / "tracking" / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.folder))

    def params(self, params: dict) -> None:
        table = "\n".join(f"| {k} | {v} |" for k, v in sorted(params.items()))
        self.writer.add_text("run", "| setting | value |\n|---|---|\n" + table, 0)

    def metrics(self, step: int, values: dict) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self, failed: bool) -> None:
        self.writer.close()

    def record(self) -> dict:
        return {"folder": str(self.folder)}


class WandbTracker:
    """One W&B run per cpuddp run, grouped by experiment; WANDB_MODE=offline
    writes it under <run>/tracking/wandb (sync it later with `wandb sync`)."""
    name = "wandb"

    def __init__(self, run_dir: Path, previous: dict, settings: ReportSettings):
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        folder = run_dir / "tracking"
        folder.mkdir(parents=True, exist_ok=True)
        experiment = run_dir.parent.name
        self.run = wandb.init(project=settings.wandb_project or experiment, group=experiment, name=run_dir.name,
                              id=previous.get("id"), resume="allow", dir=str(folder),
                              settings=wandb.Settings(init_timeout=30, console="off"))

    def params(self, params: dict) -> None:
        self.run.config.update(params, allow_val_change=True)

    def metrics(self, step: int, values: dict) -> None:
        self.run.log(values, step=step)

    def close(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)

    def record(self) -> dict:
        return {"id": self.run.id, "dir": self.run.dir, "offline": self.run.offline}


KINDS = {cls.name: cls for cls in (TensorBoardTracker, MLflowTracker, WandbTracker)}


class Trackers:
    """The open trackers of rank 0; each call goes to all of them, and one
    that raises is dropped with one warning line."""

    def __init__(self, trackers: list, log):
        self.trackers, self.log, self.grad_norm = trackers, log, None

    @classmethod
    def open(cls, settings: ReportSettings, run_dir: Path, log) -> Trackers:
        previous = read_json(record_path(run_dir)) if record_path(run_dir).exists() else {}
        trackers = []
        for name in settings.trackers:
            try:
                trackers.append(KINDS[name](run_dir, previous.get(name) or {}, settings))
            except Exception as error:  # any failure of a tracker leaves the training alone
                warn(log, name, error)
        opened = cls(trackers, log)
        if trackers:
            write_json(record_path(run_dir), {t.name: t.record() for t in trackers})
            log.info(f"tracking to {', '.join(t.name for t in trackers)} ({record_path(run_dir)})")
        return opened

    def call(self, method: str, *args) -> None:
        for tracker in list(self.trackers):
            try:
                getattr(tracker, method)(*args)
            except Exception as error:
                self.trackers.remove(tracker)
                warn(self.log, tracker.name, error)


def warn(log, name: str, error: BaseException) -> None:
    log.warning(f"tracking: {name} dropped, the training goes on ({one_line(error)})")


_active: Trackers | None = None


@contextlib.contextmanager
def opened(settings: ReportSettings, run_dir: Path, params: dict, log, main: bool = True):
    """The trackers of report.trackers, open while the training runs (rank 0
    only): the run's parameters once, then what the loop and the evaluation
    log; closed as failed if the training raises."""
    global _active
    if not main or not settings.trackers:
        yield None
        return
    _active = Trackers.open(settings, Path(run_dir), log)
    _active.call("params", params)
    failed = True
    try:
        yield _active
        failed = False
    finally:
        _active.call("close", failed)
        _active = None


def keep_grad_norm(norm) -> None:
    """The update's gradient norm from the clipping step (a tensor; read only when logged)."""
    if _active is not None:
        _active.grad_norm = norm


def log_step(step: int, loss: float, learning_rate: float, samples_per_second: float) -> None:
    """Every train.log_every steps: loss (mean over ranks), learning rate,
    gradient norm (when train.max_grad_norm clips) and samples/s."""
    if _active is None:
        return
    values = {"train/loss": float(loss), "train/learning_rate": float(learning_rate),
              "train/samples_per_second": float(samples_per_second)}
    if _active.grad_norm is not None:
        values["train/grad_norm"] = float(_active.grad_norm)
    _active.call("metrics", step, values)


def log_metrics(step: int, metrics: dict) -> None:
    """An evaluation's metrics (evaluation during training), at its step."""
    if _active is not None:
        _active.call("metrics", step, {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})


def flat(prefix: str, value) -> dict:
    """Nested settings as dotted keys (train.speed.fused_adamw); lists as JSON."""
    if isinstance(value, dict):
        return {k: v for key, inner in value.items() for k, v in flat(f"{prefix}.{key}" if prefix else key,
                                                                        inner).items()}
    return {prefix: json.dumps(value) if isinstance(value, (list, tuple)) else value}


def run_params(cfg: TrainView, decisions: RunDecisions, world_size: int, model_code: dict) -> dict:
    """What is logged once: the run's layout and decisions, then its settings."""
    choices = decisions.as_dict()
    decided = {"world_size": world_size, "nodes": decisions.nodes,
               "processes_per_node": decisions.processes_per_node,
               "threads_per_process": decisions.threads_per_process, "backend": decisions.backend,
               "precision": decisions.precision, "ipex": decisions.ipex, "levers": choices["levers"],
               **model_code}
    return {**flat("", decided), **flat("config", cfg.as_dict())}
