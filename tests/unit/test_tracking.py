"""report.trackers: the train slice carries the tracking settings only when
a tracker is named; settings are logged under dotted names. (MLflow starts
processes of its own: its tests are in tests/integration/test_tracking.py.)"""

from __future__ import annotations

from workflow.helpers.stages import stage_config
from workflow.scripts.settings.config import validate
from workflow.scripts.settings.views import TrainView
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
