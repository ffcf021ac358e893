"""Config validation: schema defaults, one-line errors, data files, models, sweeps."""

from pathlib import Path

import pytest
import yaml

from workflow.scripts.settings import config as cfg

REPO = Path(__file__).resolve().parents[2]
BASE = {"experiment": "x", "task": "mrpc", "model": "some/model"}


def config(**overrides) -> dict:
    return {**BASE, **overrides}


def error_of(value) -> str:
    with pytest.raises(cfg.ConfigError) as err:
        cfg.validate(value)
    message = str(err.value)
    assert "\n" not in message, message
    assert message.startswith("config error: ")
    return message


# ---------------------------------------------------------------- defaults

def test_minimal_config_gets_every_schema_default():
    schema = cfg.load_schema()
    done = cfg.validate(dict(BASE))
    assert done["data"] is None
    assert done["trust_remote_code"] is False
    for section in ("train", "evaluation", "distributed", "quantization"):
        for key, sub in schema["properties"][section]["properties"].items():
            if "default" in sub:
                assert done[section][key] == sub["default"], f"{section}.{key}"
    # spot checks against the published setup, independent of the schema text
    assert done["train"]["batch_size"] == 32
    assert done["train"]["precision"] == "auto"
    assert done["distributed"]["backend"] == "auto"
    assert done["distributed"]["threads_per_process"] == "auto"
    assert done["distributed"]["env"] == {}
    assert done["quantization"]["enabled"] is False


def test_user_values_are_kept_and_siblings_filled():
    done = cfg.validate(config(train={"batch_size": 8}, distributed={"processes_per_node": 4}))
    assert done["train"]["batch_size"] == 8
    assert done["train"]["epochs"] == 3
    assert done["distributed"]["processes_per_node"] == 4
    assert done["distributed"]["nodes"] == 1


def test_generate_defaults_filled_inside_data():
    done = cfg.validate(config(data={"format": "glue_tsv", "train": "t.tsv", "validation": "d.tsv",
                                     "generate": {"seed": 5}}))
    assert done["data"]["generate"] == {"train": 1600, "validation": 400, "seed": 5}


def test_validate_does_not_modify_its_input():
    given = config(train={"batch_size": 8})
    cfg.validate(given)
    assert given == config(train={"batch_size": 8})


def test_not_a_mapping():
    with pytest.raises(cfg.ConfigError, match="mapping"):
        cfg.validate(["experiment", "x"])


# ---------------------------------------------------------------- errors

def test_unknown_top_level_key():
    message = error_of(config(epochs=3))
    assert "unknown key 'epochs'" in message
    assert "train" in message and "distributed" in message  # what is allowed


def test_unknown_nested_key():
    message = error_of(config(train={"batchsize": 16}))
    assert "unknown key 'train.batchsize'" in message
    assert "batch_size" in message


def test_wrong_type():
    message = error_of(config(train={"batch_size": "thirty"}))
    assert message.startswith("config error: train.batch_size:")
    assert "'thirty'" in message and "integer" in message


def test_command_line_strings_are_typed_by_the_schema():
    """`--config 'train={epochs: 1}'` reaches the workflow as strings."""
    done = cfg.validate(config(train={"epochs": "1", "batch_size": "8", "max_steps": "null", "ipex": "false"},
                               distributed={"threads_per_process": "4", "env": {"A": "1"}},
                               sweep={"nodes": ["1", "2"]}, experiment="123"))
    assert done["train"]["epochs"] == 1 and done["train"]["batch_size"] == 8
    assert done["train"]["max_steps"] is None and done["train"]["ipex"] is False
    assert done["distributed"]["threads_per_process"] == 4
    assert done["distributed"]["env"] == {"A": "1"}  # strings allowed: kept
    assert done["sweep"]["nodes"] == [1, 2] and done["experiment"] == "123"


def test_section_key_at_top_level_names_the_form_that_works():
    message = error_of(config(epochs=1))
    assert "--config 'train={epochs: VALUE}'" in message


@pytest.mark.parametrize("section, key", [("train", "batch_size"), ("train", "epochs")])
def test_non_positive_sizes(section, key):
    message = error_of(config(**{section: {key: 0}}))
    assert message.startswith(f"config error: {section}.{key}: 0 ")
    assert "minimum" in message


@pytest.mark.parametrize("value", [0, "many", "tuned"])
def test_processes_per_node_is_a_positive_number_or_auto(value):
    message = error_of(config(distributed={"processes_per_node": value}))
    assert message.startswith(f"config error: distributed.processes_per_node: {value!r} is not allowed")
    assert "use a positive integer or 'auto'" in message
    assert cfg.validate(config())["distributed"]["processes_per_node"] == "auto"  # the default: measured


def test_unsupported_task():
    message = error_of(config(task="imdb"))
    assert message.startswith("config error: task: 'imdb'")
    for task in ("cola", "mrpc", "squad_v2"):
        assert task in message


def test_bad_enum():
    message = error_of(config(distributed={"backend": "nccl"}))
    assert message.startswith("config error: distributed.backend: 'nccl'")
    assert "auto ccl gloo" in message


@pytest.mark.parametrize("value", ["many", 0])
def test_threads_per_process(value):
    message = error_of(config(distributed={"threads_per_process": value}))
    assert message.startswith("config error: distributed.threads_per_process:")
    assert "positive integer, 'auto' or 'tuned'" in message


def test_bad_sweep_value_names_the_sweep_key():
    message = error_of(config(sweep={"processes_per_node": [1, 0]}))
    assert message.startswith("config error: sweep.processes_per_node.1:")


@pytest.mark.parametrize("missing", ["task", "model"])
def test_missing_required(missing):
    given = dict(BASE)
    del given[missing]
    assert f"'{missing}' is a required property" in error_of(given)


@pytest.mark.parametrize("task, fmt, want", [
    ("mrpc", "squad_json", "glue_tsv, csv, jsonl or parquet"),
    ("squad", "glue_tsv", "squad_json"),
    ("squad_v2", "csv", "squad_json"),
])
def test_data_format_must_fit_task(task, fmt, want):
    message = error_of(config(task=task, data={"format": fmt, "train": "a", "validation": "b"}))
    assert f"data.format {fmt}" in message and task in message and want in message


def test_mnli_needs_validation_mismatched():
    message = error_of(config(task="mnli", data={"format": "glue_tsv", "train": "a", "validation": "b"}))
    assert "data.validation_mismatched" in message and "mnli" in message
    ok = cfg.validate(config(task="mnli", data={"format": "glue_tsv", "train": "a", "validation": "b",
                                                "validation_mismatched": "c"}))
    assert ok["data"]["validation_mismatched"] == "c"


def test_validation_mismatched_only_for_mnli():
    message = error_of(config(data={"format": "glue_tsv", "train": "a", "validation": "b",
                                    "validation_mismatched": "c"}))
    assert "data.validation_mismatched" in message and "mnli" in message


def test_mnli_from_the_hub_needs_no_files():
    assert cfg.validate(config(task="mnli"))["data"] is None


# ---------------------------------------------------------------- shipped configs

@pytest.mark.parametrize("path", [REPO / "config.yaml", *sorted((REPO / "experiments").glob("*.yaml"))],
                         ids=lambda p: p.name)
def test_shipped_configs_validate(path):
    raw = yaml.safe_load(path.read_text())
    done = cfg.validate(raw)
    assert done["experiment"] == (raw["experiment"] or raw["task"])
    assert cfg.runs(done)


def test_there_are_experiment_files():
    assert list((REPO / "experiments").glob("*.yaml"))


# ---------------------------------------------------------------- data files

def local(**extra):
    return cfg.validate(config(data={"format": "glue_tsv", "train": "train.tsv", "validation": "dev.tsv",
                                     **extra}))


def test_check_data_files_missing_names_key_and_path(tmp_path):
    (tmp_path / "train.tsv").write_text("x\n")
    with pytest.raises(cfg.ConfigError) as err:
        cfg.check_data_files(local(), tmp_path)
    assert "data.validation" in str(err.value)
    assert "dev.tsv" in str(err.value)


def test_check_data_files_present(tmp_path):
    (tmp_path / "train.tsv").write_text("x\n")
    (tmp_path / "dev.tsv").write_text("x\n")
    cfg.check_data_files(local(), tmp_path)


def test_check_data_files_skipped_when_generated(tmp_path):
    cfg.check_data_files(local(generate={}), tmp_path)


def test_check_data_files_skipped_for_hub():
    cfg.check_data_files(cfg.validate(dict(BASE)), Path("/nonexistent"))


def test_data_files_lists_splits():
    done = cfg.validate(config(task="mnli", data={"format": "glue_tsv", "train": "a", "validation": "b",
                                                  "validation_mismatched": "c"}))
    assert cfg.data_files(done) == {"train": "a", "validation": "b", "validation_mismatched": "c"}
    assert cfg.data_files(cfg.validate(dict(BASE))) == {}


# ---------------------------------------------------------------- sweeps

def test_runs_without_sweep():
    done = cfg.validate(dict(BASE))
    assert cfg.runs(done) == {"default": done}


def test_runs_of_a_sweep():
    done = cfg.validate(config(sweep={"processes_per_node": [1, 2], "backend": ["gloo"]}))
    runs = cfg.runs(done)
    assert list(runs) == ["ppn1-gloo", "ppn2-gloo"]  # baseline first
    assert runs["ppn1-gloo"]["distributed"]["processes_per_node"] == 1
    assert runs["ppn2-gloo"]["distributed"]["processes_per_node"] == 2
    for run in runs.values():
        assert run["distributed"]["backend"] == "gloo"
        assert "sweep" not in run
        assert run["train"] == done["train"]
    # each run is its own copy; the experiment config is untouched
    runs["ppn1-gloo"]["distributed"]["env"]["X"] = "1"
    assert runs["ppn2-gloo"]["distributed"]["env"] == {}
    assert done["distributed"]["processes_per_node"] == "auto"
    assert done["sweep"] == {"processes_per_node": [1, 2], "backend": ["gloo"]}


def test_sweep_over_precision_and_threads_sets_their_sections():
    done = cfg.validate(config(sweep={"threads_per_process": [1, "auto"], "precision": ["fp32"]}))
    runs = cfg.runs(done)
    assert list(runs) == ["t1-fp32", "tauto-fp32"]
    assert runs["t1-fp32"]["distributed"]["threads_per_process"] == 1
    assert runs["tauto-fp32"]["train"]["precision"] == "fp32"


def test_slurm_runs_need_a_thread_count():
    """srun: --cpus-per-task is fixed at submission, so auto cannot size it."""
    slurm = {"launcher": "srun", "nodes": 2, "processes_per_node": 2, "threads_per_process": "auto"}
    with pytest.raises(cfg.ConfigError, match="threads_per_process is auto, but with launcher srun"):
        cfg.check_hostfile(cfg.validate(config(distributed=slurm)))
    swept = config(distributed={**slurm, "threads_per_process": 4}, sweep={"threads_per_process": [2, "tuned"]})
    with pytest.raises(cfg.ConfigError, match="threads_per_process is tuned"):
        cfg.check_hostfile(cfg.validate(swept))
    cfg.check_hostfile(cfg.validate(config(distributed={**slurm, "threads_per_process": 4})))
    # nor can processes_per_node auto size --ntasks-per-node
    with pytest.raises(cfg.ConfigError, match="processes_per_node is auto, but with launcher srun"):
        cfg.check_hostfile(cfg.validate(config(distributed={**slurm, "processes_per_node": "auto",
                                                            "threads_per_process": 4})))


@pytest.mark.parametrize("path", sorted((REPO / "experiments").glob("demo*.yaml")), ids=lambda p: p.name)
def test_every_demo_experiment_is_run_by_an_integration_test(path):
    """The demo files are the checked-in test configs: a new one that no test runs fails here
    (test_demo_experiments.py runs most as they are; a few have a file of their own, or a
    helper that builds a run several files read: tests/helpers/sweep.py)."""
    name = path.stem
    tests = [*(REPO / "tests" / "integration").glob("test_*.py"), *(REPO / "tests" / "helpers").glob("*.py")]
    assert [t.name for t in tests if f'"{name}"' in t.read_text() or f"{name}.yaml" in t.read_text()], \
        f"no integration test runs experiments/{path.name}"
