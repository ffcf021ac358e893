"""MLflow tracking of one cpuddp run (train/tracking.py): one MLflow run per
run, under one parent run per experiment, so that MLflow's compare view
shows a sweep's runs side by side.

The MLflow experiment is named after the cpuddp experiment. Its parent run
is found by tag (cpuddp.parent) or created; the runs of a sweep that start
at once agree on it: a lock file in the experiment's results folder orders
them, and a run that created a parent beside an older one deletes its own.
A retry continues the MLflow run that tracking.json recorded.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

from workflow.scripts.common.tracked import mlflow_client
from workflow.scripts.settings.views import ReportSettings

PARENT_TAG = "cpuddp.parent"


def tracking_uri(settings: ReportSettings) -> str | None:
    """MLFLOW_TRACKING_URI wins over report.mlflow_tracking_uri; neither: MLflow's default."""
    return os.environ.get("MLFLOW_TRACKING_URI") or settings.mlflow_tracking_uri


def experiment_id(client, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # another run created it first
        return client.get_experiment_by_name(name).experiment_id


@contextlib.contextmanager
def experiment_lock(folder: Path):
    """An exclusive lock on <results>/<experiment>/.mlflow-parent.lock while
    the parent run is found or created (several runs may start at once)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".mlflow-parent.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def parents(client, experiment: str) -> list:
    runs = client.search_runs([experiment], filter_string=f"tags.`{PARENT_TAG}` = 'true'")
    return sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))


def parent_run(client, experiment: str, name: str) -> str:
    """The experiment's parent run: the oldest tagged one, else a new one."""
    found = parents(client, experiment)
    if found:
        return found[0].info.run_id
    mine = client.create_run(experiment, run_name=name, tags={PARENT_TAG: "true", "cpuddp.experiment": name})
    oldest = parents(client, experiment)[0].info.run_id
    if oldest != mine.info.run_id:  # another run's parent came first: keep that one
        client.delete_run(mine.info.run_id)
    return oldest


class MLflowTracker:
    """One MLflow run (a child of the experiment's parent run)."""
    name = "mlflow"

    def __init__(self, run_dir: Path, previous: dict, settings: ReportSettings):
        self.uri = tracking_uri(settings)
        self.client = mlflow_client(self.uri)
        experiment, run = run_dir.parent.name, run_dir.name
        self.experiment_id = experiment_id(self.client, experiment)
        if previous.get("run_id") and previous.get("uri") == self.uri:  # a retry: the same MLflow run
            self.run_id, self.parent_id = previous["run_id"], previous.get("parent_run_id")
            self.client.update_run(self.run_id, status="RUNNING")
            return
        with experiment_lock(run_dir.parent):
            self.parent_id = parent_run(self.client, self.experiment_id, experiment)
        tags = {"mlflow.parentRunId": self.parent_id, "cpuddp.experiment": experiment, "cpuddp.run": run}
        self.run_id = self.client.create_run(self.experiment_id, run_name=run, tags=tags).info.run_id

    def params(self, params: dict) -> None:
        from mlflow.entities import Param

        known = self.client.get_run(self.run_id).data.params  # a retry logs only what is new
        batch = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in known]
        for start in range(0, len(batch), 100):  # MLflow takes at most 100 params a call
            self.client.log_batch(self.run_id, params=batch[start:start + 100])

    def metrics(self, step: int, values: dict) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def close(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")

    def record(self) -> dict:
        return {"uri": self.uri, "experiment_id": self.experiment_id, "run_id": self.run_id,
                "parent_run_id": self.parent_id}
