"""What the report steps read besides summary.json: the files of a run
folder and the published figures of an experiment file. summary.py,
render.py and compare.py share these, so that the file names and the shape
of `published:` are known in one place."""

from __future__ import annotations

from pathlib import Path

from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.candidates import DEPLOY_FILE  # noqa: F401  (in deploy/, written by deploy_model)

ENVIRONMENT = "environment.json"
TRAIN_METRICS = "train_metrics.json"
RUNTIMES = "eval_runtimes.json"  # evaluate_runtimes: eager fp32, OpenVINO fp32 and int8 side by side


def read_environment(run_dir: Path) -> dict:
    """The run's environment.json: machine, software and launch choices."""
    return read_json(run_dir / ENVIRONMENT)


def read_train_metrics(run_dir: Path) -> dict:
    """The run's train_metrics.json: layout, throughput and loss history."""
    return read_json(run_dir / TRAIN_METRICS)


def published_figures(published: dict | None) -> dict:
    """run -> {field: value} of a `published:` block; empty without one."""
    return (published or {}).get("figures") or {}
