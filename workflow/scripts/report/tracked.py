"""After training, the MLflow runs get what only the report knows: each
run's sweep values as parameters (sweep.<key>), its summary figures as
metrics, and summary.json and the model card (model/README.md) as
artifacts; the experiment's parent run gets summary.json too, and is
marked finished. A run is found by the tracking.json that training left in
its folder; a server that cannot be reached costs one warning line, never
the report."""

from __future__ import annotations

import sys
from pathlib import Path

from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.tracked import mlflow_client, one_line, record_path

FIGURES = ("train_samples_per_second", "train_seconds", "final_loss", "speedup", "scaling_efficiency")


def figures(entry: dict) -> dict:
    """The summary entry's numbers worth comparing in MLflow."""
    found = {f"summary/{k}": entry[k] for k in FIGURES if isinstance(entry.get(k), (int, float))}
    for kind, metrics in (entry.get("eval") or {}).items():
        for name, value in (metrics or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found[f"summary/eval_{kind}/{name}"] = value
    return found


def attach_run(record: dict, run_dir: Path, entry: dict, summary_path: Path, parents: set) -> None:
    from mlflow.entities import Metric, Param

    client = mlflow_client(record.get("uri"))
    run_id = record["run_id"]
    known = client.get_run(run_id).data.params
    params = [Param(f"sweep.{k}", str(v)) for k, v in (entry.get("sweep") or {}).items()
              if f"sweep.{k}" not in known]
    metrics = [Metric(k, float(v), 0, 0) for k, v in figures(entry).items()]
    client.log_batch(run_id, metrics=metrics, params=params)
    client.log_artifact(run_id, str(summary_path))
    card = run_dir / "model" / "README.md"
    if card.exists():
        client.log_artifact(run_id, str(card), artifact_path="model")
    parent = record.get("parent_run_id")
    if parent and (record.get("uri"), parent) not in parents:
        client.log_artifact(parent, str(summary_path))
        client.set_terminated(parent, "FINISHED")  # its runs are summarized
        parents.add((record.get("uri"), parent))


def attach(results_dir: Path, summary: dict, summary_path: Path) -> None:
    """For every run of `summary` that training tracked in MLflow."""
    parents: set = set()
    for entry in summary["runs"]:
        run_dir = results_dir / entry["run"]
        path = record_path(run_dir)
        record = read_json(path).get("mlflow") if path.exists() else None
        if not record:
            continue
        try:
            attach_run(record, run_dir, entry, summary_path, parents)
        except Exception as error:  # a tracker never fails the report
            print(f"warning: tracking: mlflow: nothing attached to run {entry['run']} ({one_line(error)})",
                  file=sys.stderr)
