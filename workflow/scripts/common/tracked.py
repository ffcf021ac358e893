"""What the training's trackers leave in a run folder (tracking.json), and
an MLflow client that never blocks for long: both the training
(train/tracking.py) and the report (report/tracked.py) use them."""

from __future__ import annotations

import logging
import os
from pathlib import Path

TRACKING_FILE = "tracking.json"
"""In the run folder: which trackers rank 0 opened, and where (the MLflow
run id and URI, the TensorBoard and W&B folders), so that a retry continues
the same runs and the report attaches its files to them."""

# A tracker that cannot be reached costs seconds, not MLflow's default of
# 7 retries with exponential backoff; a value set in the environment wins.
MLFLOW_BOUNDS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}


def mlflow_client(uri: str | None):
    """An MlflowClient for `uri` (None: MLflow's own default), with bounded retries."""
    for key, value in MLFLOW_BOUNDS.items():
        os.environ.setdefault(key, value)
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)  # its retry lines: ours says it once
    from mlflow.tracking import MlflowClient  # imported only when MLflow is asked for

    return MlflowClient(tracking_uri=uri)


def one_line(error: BaseException) -> str:
    """An exception as one short line, for a warning."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200] if text else ''}"


def record_path(run_dir) -> Path:
    return Path(run_dir) / TRACKING_FILE
