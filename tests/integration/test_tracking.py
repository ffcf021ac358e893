"""Experiment tracking (report.trackers) through the real workflow: the tiny
sweep (1 then 2 ranks, 3 steps each, an evaluation every 2 steps) tracked
to a real `mlflow server` (SQLite) started here, to TensorBoard and to W&B
offline, each read back with its own reader; and a tracker that cannot be
reached, which costs one warning line and never the training. In one
process: the runs of an experiment share one MLflow parent (a real SQLite
store), a retry continues its MLflow run, a failing tracker is dropped."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from helpers import wandb_file
from helpers.ranks import free_port
from helpers.sweep import EXPERIMENT, RUNS, sweep_experiment
from helpers.workflow import snakemake, tiny_experiment, write_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from workflow.scripts.settings.views import ReportSettings
from workflow.scripts.train import tracking
from workflow.scripts.train.tracking_mlflow import MLflowTracker

BIN = Path(sys.executable).parent


@pytest.fixture
def mlflow_server(tmp_path):
    """A real MLflow tracking server with a SQLite store on a free local port; its URI."""
    port, folder = free_port(), tmp_path / "mlflow"
    folder.mkdir()
    argv = [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{folder}/mlflow.db",
            "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1"]
    # MLflow 3's job runner (huey consumer processes, for its GenAI jobs) is no part of
    # tracking: off, it saves their start-up (7 processes, 23 CPU s here, 2026-12-02)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(folder / "server.log", "w") as log:  # the server keeps its own copy of the file
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    uri = f"http://127.0.0.1:{port}"
    try:
        # its start-up (imports, database tables, workers) took 77 s on a busy 2-core CI VM (2026-11-28)
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=2)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (folder / "server.log").read_text()
                time.sleep(0.5)
        yield uri
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:  # its workers' graceful stop waits up to 30 s for open requests
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


def read_back(uri: str):
    """(parent, {run name: child run}) of the experiment, through MLflow's client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("cpuddp.parent") == "true"]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    children = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId")}
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in children.values())
    return client, parents[0], children


def test_a_sweep_is_tracked_in_mlflow_tensorboard_and_wandb(tmp_path, tiny_model_dir, mlflow_server, monkeypatch):
    configfile = sweep_experiment(tmp_path, tiny_model_dir, report={"trackers": ["tensorboard", "mlflow", "wandb"]},
                                  evaluation={"every": 2, "batch_size": 16})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("WANDB_MODE", "offline")
    snakemake(tmp_path, configfile)

    client, parent, children = read_back(mlflow_server)
    assert sorted(children) == RUNS and all(r.info.status == "FINISHED" for r in children.values())
    two = children["ppn2"]
    assert two.data.params["world_size"] == "2" and two.data.params["precision"] == "fp32"
    assert two.data.params["sweep.processes_per_node"] == "2"  # the sweep's value, for the compare view
    assert two.data.params["config.train.learning_rate"] == "0.001"
    assert any(k.startswith("levers.") for k in two.data.params)
    losses = client.get_metric_history(two.info.run_id, "train/loss")
    assert [m.step for m in losses] == [1, 2, 3]  # log_every 1
    for name in ("train/learning_rate", "train/grad_norm", "train/samples_per_second"):
        assert [m.step for m in client.get_metric_history(two.info.run_id, name)] == [1, 2, 3], name
    assert [m.step for m in client.get_metric_history(two.info.run_id, "eval/f1")] == [2, 3]
    assert "summary/train_samples_per_second" in two.data.metrics
    artifacts = {a.path for a in client.list_artifacts(two.info.run_id)}
    assert {"summary.json", "model"} <= artifacts
    assert [a.path for a in client.list_artifacts(two.info.run_id, "model")] == ["model/README.md"]
    assert "summary.json" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert parent.info.status == "FINISHED"

    run = tmp_path / "results" / EXPERIMENT / "ppn2"
    events = EventAccumulator(str(run / "tracking" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3]
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx([m.value for m in losses])
    assert [e.step for e in events.Scalars("eval/f1")] == [2, 3]

    record = json.loads((run / "tracking.json").read_text())
    assert record["mlflow"]["run_id"] == two.info.run_id and record["wandb"]["offline"] is True
    (offline,) = (run / "tracking" / "wandb").glob("offline-run-*/run-*.wandb")
    rows = wandb_file.history(offline)
    assert [r["_step"] for r in rows if "train/loss" in r] == [1, 2, 3]
    assert [r["_step"] for r in rows if "eval/f1" in r] == [2, 3]
    assert wandb_file.config(offline)["world_size"] == 2


def test_a_tracker_that_cannot_be_reached_never_fails_the_training(tmp_path, tiny_model_dir, monkeypatch):
    configfile = tiny_experiment(tmp_path, tiny_model_dir, max_steps=2)
    config = yaml.safe_load(configfile.read_text())
    config["report"] = {"trackers": ["mlflow", "tensorboard"],
                        "mlflow_tracking_uri": f"http://127.0.0.1:{free_port()}"}  # nothing listens there
    config["distributed"]["processes_per_node"] = 1  # trackers live on rank 0 alone (train/tracking.py)
    write_config(configfile, config)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    target = "results/tiny/default/train_metrics.json"
    started = time.monotonic()
    snakemake(tmp_path, configfile, target)
    log = (tmp_path / "logs/train_ddp/tiny/default.log").read_text()
    warnings = [line for line in log.splitlines() if "tracking: mlflow dropped, the training goes on" in line]
    assert len(warnings) == 1, log[-3000:]
    assert json.loads((tmp_path / target).read_text())["steps"] == 2
    record = json.loads((tmp_path / "results/tiny/default/tracking.json").read_text())
    assert list(record) == ["tensorboard"]  # the others still track
    assert time.monotonic() - started < 150


def test_runs_share_one_parent_and_a_retry_continues_its_run(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    settings = ReportSettings(trackers=["mlflow"], mlflow_tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    first = MLflowTracker(tmp_path / "exp" / "a", {}, settings)
    second = MLflowTracker(tmp_path / "exp" / "b", {}, settings)
    assert first.parent_id == second.parent_id and first.run_id != second.run_id
    first.params({"world_size": 2})
    retry = MLflowTracker(tmp_path / "exp" / "a", first.record(), settings)
    assert retry.run_id == first.run_id
    retry.params({"world_size": 2, "nodes": 1})  # the known one is not logged again
    run = retry.client.get_run(first.run_id)
    assert run.data.params == {"world_size": "2", "nodes": "1"}
    assert run.data.tags["mlflow.parentRunId"] == first.parent_id and run.info.run_name == "a"


def test_a_failing_tracker_is_dropped_with_one_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_dir = tmp_path / "exp" / "run"
    run_dir.mkdir(parents=True)
    settings = ReportSettings(trackers=["tensorboard", "mlflow"], mlflow_tracking_uri="http://127.0.0.1:9")
    log = logging.getLogger("test-tracking")
    with caplog.at_level(logging.WARNING, logger="test-tracking"), \
            tracking.opened(settings, run_dir, {"world_size": 2}, log):
        for step in (1, 2):
            tracking.keep_grad_norm(0.5 * step)
            tracking.log_step(step, loss=1.0 / step, learning_rate=1e-3, samples_per_second=10.0)
        tracking.log_metrics(2, {"eval/f1": 0.75, "eval/note": "not a number"})
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and warnings[0].startswith("tracking: mlflow dropped, the training goes on (")
    assert list(json.loads((run_dir / "tracking.json").read_text())) == ["tensorboard"]
    events = EventAccumulator(str(run_dir / "tracking" / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/grad_norm")] == [(1, 0.5), (2, 1.0)]
    assert [e.step for e in events.Scalars("eval/f1")] == [2]
    tracking.log_step(3, 0.1, 1e-3, 10.0)  # closed: nothing is open, nothing fails
