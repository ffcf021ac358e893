"""The typed configuration views (settings/views.py), built from the schema:
every schema key is a field with the schema's default, and every stage's
slice of every experiment loads as its view."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import pytest
import yaml

from workflow.scripts.settings import config as cfg
from workflow.helpers import stages
from workflow.scripts.settings import views
from workflow.scripts.settings.schema import View

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
    hint = typing.get_type_hints(view)[key]
    section = next((t for t in typing.get_args(hint) or (hint,) if isinstance(t, type) and issubclass(t, View)), None)
    if isinstance(value, dict) and section is not None:
        return section.of(value).as_dict()
    return value


@pytest.mark.parametrize("stage", views.STAGE_SUBKEYS)
def test_a_stage_reading_a_key_outside_its_slice_fails_at_once(stage):
    """The stage reads only the keys of its slice (stages.py cuts it with the same table):
    another key is an AttributeError, not the schema's default seen silently."""
    config = cfg.validate({"task": "mrpc", "model": "m", "train": {"batch_size": 8, "max_seq_length": 64}})
    (run,) = cfg.runs(config).values()
    view = views.STAGE_VIEWS[stage].of(stages.stage_config(stage, run))
    for section, keys in views.STAGE_SUBKEYS[stage].items():
        assert list(fields(getattr(view, section))) == list(keys)
        outside = next(k for k in fields(views.SECTIONS[section]) if k not in keys)  # a key of another stage
        with pytest.raises(AttributeError):
            getattr(getattr(view, section), outside)


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
    assert view.distributed == views.DistributedSettings.of(config["distributed"])
    assert view.train.as_dict() == {k: v for k, v in views.TrainSettings.of(config["train"]).as_dict().items()
                                    if k in views.STAGE_SUBKEYS["environment"]["train"]}  # its slice of train


def test_the_data_view_of_a_whole_demo_configuration_leaves_out_the_generator():
    config = cfg.validate(yaml.safe_load((REPO / "experiments/demo.yaml").read_text()))
    assert "generate" in config["data"]
    view = views.DataView.pick(config)
    assert view.data.format == "glue_tsv" and view.data.train == config["data"]["train"]


# Each entry point types the configuration once (settings/step.py, the
# launcher's and the checks' main, the Snakefile's dist_of); nothing below
# takes a mapping in place of a view, nor re-types one.
VIEW_NAMES = {name for name, value in vars(views).items()
              if isinstance(value, type) and issubclass(value, views.View)} | {"Levers"}
RETYPING = {"distributed_of", "train_of"}
CONVERTERS = {"of", "pick"}  # View.of / View.pick: where a mapping becomes a view


def _names(annotation: ast.AST) -> set[str]:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(annotation)
            if isinstance(n, (ast.Name, ast.Attribute))}


def untyped_config(source: str, where: str) -> list[str]:
    """Parameters annotated `SomeView | dict` and calls that re-type a
    mapping, one line each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in CONVERTERS:
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                        *filter(None, (arguments.vararg, arguments.kwarg))]:
                names = _names(arg.annotation) if arg.annotation else set()
                if "dict" in names and names & VIEW_NAMES:
                    found.append(f"{where}:{node.lineno} {node.name}({arg.arg}: {ast.unparse(arg.annotation)})")
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in RETYPING:
                found.append(f"{where}:{node.lineno} calls {name}")
    return found


def test_no_function_takes_a_view_or_a_mapping():
    found = []
    for folder in ("workflow/scripts", "workflow/helpers", "bench"):
        for path in sorted((REPO / folder).rglob("*.py")):
            found += untyped_config(path.read_text(), str(path.relative_to(REPO)))
    assert found == [], "type the configuration once, at the entry point: " + "; ".join(found)
    assert not RETYPING & set(vars(views)), "settings/views.py re-types mappings again"


def test_a_view_or_mapping_parameter_is_caught():
    source = ("def f(config: TrainView | dict, dist: 'DistributedSettings | dict', ok: TrainView, other: dict):\n"
              "    return distributed_of(config), views.train_of(config)\n"
              "def of(value: Levers | dict | None):\n    return value\n")
    assert untyped_config(source, "x.py") == [
        "x.py:1 f(config: TrainView | dict)", "x.py:1 f(dist: 'DistributedSettings | dict')",
        "x.py:2 calls distributed_of", "x.py:2 calls train_of"]
