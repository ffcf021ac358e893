"""One whole training run outside the workflow (tuning bursts, benches):
the environment record, the launch through the workflow's launcher, and
the run's metrics."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.errors import UserError
from workflow.scripts.launch import job
from workflow.scripts.nodes import describe
from workflow.scripts.settings.views import TrainView


def run_training(config: dict, data: str, work: Path, what: str) -> tuple[dict, dict]:
    """One training run of `config` launched like the workflow's: (environment, train_metrics).
    `config` is written for the ranks as it is; this launch reads it typed, once."""
    view = TrainView.pick(config)
    info = describe.environment_record(view.distributed, view.train)
    (work / "train.json").write_text(json.dumps(config))
    (work / "env.json").write_text(json.dumps(info))
    program = [sys.executable, "-m", "workflow.scripts.train.rank", "--config", str(work / "train.json"),
               "--environment", str(work / "env.json"), "--data", data, "--out", str(work),
               "--log-dir", str(work / "logs")]
    try:
        job.run(view.distributed, info, program, work / "logs", quiet=True)
    except UserError as err:
        raise UserError(f"{what} failed with {view.distributed.processes_per_node} ranks: {err}") from None
    return info, read_json(work / "train_metrics.json")


