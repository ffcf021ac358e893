"""The typed configuration views (settings/views.py), built from the schema:
every schema key is a field with the schema's default, and every stage's
slice of every experiment loads as its view."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from workflow.scripts.settings import config as cfg
from workflow.helpers import stages
from workflow.scripts.settings import views

REPO = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
EXPERIMENTS = sorted((REPO / "experiments").glob("*.yaml"))


def fields(cls) -> dict:
    return {f.name: f for f in dataclasses.fields(cls)}


def default_of(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else "<required>"


@pytest.mark.parametrize("section", sorted(views.SECTIONS))
def test_section_fields_and_defaults_are_the_schemas(section):
    properties = SCHEMA["properties"][section]["properties"]
    declared = fields(views.SECTIONS[section])
    keys = set(properties) - {"generate"}  # the demo's generator is not data a stage reads
    assert set(declared) == keys
    for name, spec in properties.items():
        if "default" in spec and name in declared:
            default = default_of(declared[name])
            default = default.as_dict() if dataclasses.is_dataclass(default) else default
            assert default == spec["default"], f"{section}.{name}"


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_stage_slice_of_every_experiment_loads_as_its_view(experiment):
    config = cfg.validate(yaml.safe_load(experiment.read_text()))
    for run in cfg.runs(config).values():
        for stage, view in views.STAGE_VIEWS.items():
            sliced = stages.stage_config(stage, run)
            loaded = view.of(sliced)
            assert set(fields(view)) >= set(sliced), stage
            assert {k: v for k, v in loaded.as_dict().items() if k in sliced} == \
                   {k: _full(view, k, v) for k, v in sliced.items()}, stage


def _full(view, key, value):
    """A slice's section with the view's defaults for the keys it leaves out."""
    if isinstance(value, dict) and key in views.SECTIONS:
        return views.SECTIONS[key].of(value).as_dict()
    return value


def test_a_train_view_is_typed_all_the_way_down():
    view = views.TrainView.of({"task": "mrpc", "model": "m", "train": {"batch_size": 8},
                               "distributed": {"nodes": 2, "env": {"A": "1"}}})
    assert isinstance(view.train, views.TrainSettings) and view.train.batch_size == 8
    assert view.train.seed == 42  # the schema's default
    assert isinstance(view.distributed, views.DistributedSettings) and view.distributed.env == {"A": "1"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.train.batch_size = 16


def test_an_unknown_key_is_named():
    with pytest.raises(ValueError, match="unknown configuration key.*batch_sise"):
        views.TrainSettings.of({"batch_sise": 8})
    with pytest.raises(ValueError, match="EvaluateView: unknown configuration key.*train"):
        views.EvaluateView.of({"task": "mrpc", "train": {}})


def test_pick_takes_the_views_part_of_a_whole_configuration():
    config = cfg.validate({"experiment": "t", "task": "mrpc", "model": "m",
                           "distributed": {"processes_per_node": 1}})
    view = views.EnvironmentView.pick(config)
    assert view.distributed.processes_per_node == 1 and view.train.precision == "auto"
    assert views.distributed_of(config) == view.distributed == views.distributed_of(view)
    assert views.train_of(config) == view.train


def test_the_data_view_of_a_whole_demo_configuration_leaves_out_the_generator():
    config = cfg.validate(yaml.safe_load((REPO / "experiments/demo.yaml").read_text()))
    assert "generate" in config["data"]
    view = views.DataView.pick(config)
    assert view.data.format == "glue_tsv" and view.data.train == config["data"]["train"]
