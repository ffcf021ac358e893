"""report.trackers: the train slice carries the tracking settings only when
a tracker is named; settings are logged under dotted names. (MLflow starts
processes of its own: its tests are in tests/integration/test_tracking.py.)
The launcher forwards the trackers' variables to the ranks by name."""

from __future__ import annotations

from workflow.helpers.stages import stage_config
from workflow.scripts.settings.config import validate
from workflow.scripts.launch import command as launch
from workflow.scripts.settings.views import DistributedSettings, TrainView
from workflow.scripts.train import tracking


def test_the_train_slice_has_the_tracking_settings_only_with_a_tracker(tmp_path):
    config = {"task": "mrpc", "model": "m", "experiment": "e"}
    plain = stage_config("train", validate(config))
    assert "report" not in plain and TrainView.of(plain).report.trackers == []
    tracked = stage_config("train", validate({**config, "report": {"trackers": ["mlflow"]}}))
    view = TrainView.of(tracked)
    assert view.report.trackers == ["mlflow"] and view.report.mlflow_tracking_uri is None


def test_settings_are_flattened_to_dotted_names():
    assert tracking.flat("", {"train": {"speed": {"fused": True}, "lr": 1e-3}, "hosts": ["a", "b"]}) == {
        "train.speed.fused": True, "train.lr": 1e-3, "hosts": '["a", "b"]'}


def test_the_trackers_variables_reach_the_ranks_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    monkeypatch.setenv("WANDB_API_KEY", "secret-key")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    info = {"backend": "gloo", "nodes": 1, "processes_per_node": 2, "threads_per_process": 1,
            "mpi": {"flavour": "openmpi", "mpirun": "mpirun"}}
    argv = launch.build(DistributedSettings(), info, ["python", "-m", "x"], tmp_path)
    forwarded = [argv[i + 1] for i, word in enumerate(argv) if word == "-x"]
    assert {"MLFLOW_TRACKING_URI", "WANDB_API_KEY"} <= set(forwarded) and "WANDB_MODE" not in forwarded
    assert not [word for word in argv if "secret-key" in word]  # by name: the value stays out of argv
