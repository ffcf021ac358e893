"""Experiment configuration: schema validation, defaults, runs of a sweep.

The Snakefile calls `load_config` at parse time, so a bad value stops the
workflow before any rule runs, with one line naming the key. It asks only
what this machine answers alone (schema, files): every job that Slurm starts
parses the workflow again, on nodes without a route to the Hub. What needs
the Hub (`check_hub`) is asked once, by Snakemake's main process.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import jsonschema
import yaml

from workflow.scripts.settings import hub
from workflow.scripts.common.errors import UserError
from workflow.scripts.settings import layout
from workflow.scripts.settings import sweep as sweeps
from workflow.scripts.settings.hostfile import check_nodes
from workflow.scripts.settings.adapters import lora_problem
from workflow.scripts.settings.layers import coerce
from workflow.scripts.settings.model_id import fetched_dir, is_hub_id, is_hub_id_form
from workflow.scripts.settings.schema import SCHEMA
from workflow.scripts.settings.recipe import RecipeError, apply_required_threads, with_task_defaults
from workflow.scripts.common.tasks import formats_for, get_task

SWEEP_SECTIONS = sweeps.SECTIONS


class ConfigError(ValueError):
    """A configuration value the user has to change."""


def load_schema() -> dict:
    """The schema as read once at import (settings/schema.py), a copy for the caller to keep."""
    return copy.deepcopy(SCHEMA)


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        parts.append(extra[0] if extra else "?")
    return ".".join(parts) or "(top level)"


def _describe(error: jsonschema.ValidationError) -> str:
    """One line: the key, the bad value and what is allowed."""
    key = _key_path(error)
    schema = error.schema
    if error.validator == "additionalProperties":
        allowed = ", ".join(sorted(schema.get("properties", {})))
        return f"unknown key '{key}'; allowed here: {allowed}{_nested_hint(schema, key)}"
    if error.validator == "required":
        return f"{key}: {error.message}"
    if "enum" in schema:
        allowed = " ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in schema["enum"])
        return f"{key}: {error.instance!r} is not allowed; choose one of: {allowed}"
    if error.validator == "anyOf" and key == "data":
        return "data: give data.train and data.validation, or data.glue_dir (a GLUE archive folder)"
    if error.validator == "oneOf":
        words = "integer or 'auto'" if key.endswith("processes_per_node") else "integer, 'auto' or 'tuned'"
        return f"{key}: {error.instance!r} is not allowed; use a positive {words}"
    return f"{key}: {error.message}"


def _nested_hint(schema: dict, key: str) -> str:
    """A section's key given at the top level (`--config epochs=1`): name the form that works."""
    if "." in key:
        return ""
    for section, sub in schema.get("properties", {}).items():
        if key in sub.get("properties", {}):
            return f"; {key} is in section {section}: --config '{section}={{{key}: VALUE}}'"
    return ""


def _fill_defaults(schema: dict, value):
    """Return `value` with every schema default filled in (recursively)."""
    if not isinstance(value, dict) or "properties" not in schema:
        return value
    filled = dict(value)
    for key, sub in schema["properties"].items():
        if key not in filled and "default" in sub:
            filled[key] = copy.deepcopy(sub["default"])
        if key in filled:
            filled[key] = _fill_defaults(sub, filled[key])
    return filled


def validate(config: dict) -> dict:
    """Validate against the schema and return the config with defaults."""
    if not isinstance(config, dict):
        raise ConfigError("configuration must be a mapping of keys to values")
    schema = load_schema()
    config = coerce(schema, config)
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(config),
        key=lambda e: (len(list(e.absolute_path)), list(map(str, e.absolute_path))),
    )
    if errors:
        raise ConfigError(f"config error: {_describe(errors[0])}")
    config = _fill_defaults(schema, config)
    try:
        with_task_defaults(config)
        sweeps.resolve_glue_dir(config)
    except RecipeError as err:
        raise ConfigError(f"config error: {err}") from None
    except ValueError as err:
        raise ConfigError(str(err)) from None
    _check_consistency(config)
    for run in runs(config).values():  # a swept task must fit the data too
        _check_consistency(run)
    return config


def _check_consistency(config: dict) -> None:
    data = config.get("data")
    if data and data.get("validation_mismatched") and config["task"] != "mnli":
        raise ConfigError("config error: data.validation_mismatched is only for task mnli")
    if config["task"] == "mnli" and data and not data.get("validation_mismatched"):
        raise ConfigError(
            "config error: task mnli needs data.validation_mismatched "
            "(the dev_mismatched file) besides data.validation"
        )
    _check_own_data(config)
    _check_evaluation(config)
    if problem := lora_problem(config):
        raise ConfigError(f"config error: {problem}")
    fits = formats_for(get_task(config["task"]))
    if data and data["format"] not in fits:
        want = ", ".join(fits[:-1]) + " or " + fits[-1] if len(fits) > 1 else fits[0]
        raise ConfigError(f"config error: data.format {data['format']} does not fit task {config['task']}; use {want}")


def _check_evaluation(config: dict) -> None:
    """train.best_model and train.early_stopping decide on evaluations during training."""
    train = config.get("train") or {}
    wanted = [k for k in ("best_model", "early_stopping") if train.get(k) is not None]
    if wanted and (config.get("evaluation") or {}).get("every") is None:
        raise ConfigError(f"config error: train.{' and train.'.join(wanted)} need evaluation during training: "
                          "set evaluation.every (epoch or a number of steps)")


def _check_own_data(config: dict) -> None:
    """Own-data tasks need files and their text columns; GLUE and SQuAD have their own columns."""
    data, task = config.get("data"), get_task(config["task"])
    if task.own and not (data and data.get("text_columns")):
        raise ConfigError(f"config error: task {task.name} reads your own files: set data.format, data.train, "
                          "data.validation and data.text_columns (and data.label_column)")
    if not task.own and data and data.get("text_columns"):
        raise ConfigError(f"config error: data.text_columns is for own data (task classification, multi_label, "
                          f"regression); {task.name} has its own columns")
    if data and (data["format"] == "hub") != bool(data.get("dataset")):
        raise ConfigError("config error: data.format hub and data.dataset go together: the Hub dataset id "
                          "(train and validation then name its splits), or a file format without data.dataset")
    if task.own and not data.get("header", True) and not all(
            isinstance(c, int) for c in [*data["text_columns"], data.get("label_column", "label")]):
        raise ConfigError("config error: with data.header: false, data.text_columns and data.label_column "
                          "are 0-based column positions (numbers)")


def data_files(config: dict) -> dict[str, str]:
    """The local data files by split name ({} when data comes from the Hub)."""
    data = config.get("data") or {}
    if data.get("format") == "hub":  # train and validation name the dataset's splits
        return {}
    keys = ("train", "validation", "validation_mismatched")
    return {k: data[k] for k in keys if data.get(k)}


def check_data_files(config: dict, base: Path = Path(".")) -> None:
    """Local data files must exist, unless a rule generates them."""
    if not config.get("data") or "generate" in config["data"]:
        return
    for key, path in data_files(config).items():
        if not (base / path).is_file():
            raise ConfigError(f"config error: data.{key}: file not found: {path}")


def resolve_model(model: str) -> str:
    """`pkg:<package>/<folder>` -> the folder inside the installed package."""
    if not model.startswith("pkg:"):
        return model
    package, _, folder = model[len("pkg:"):].partition("/")
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:  # a dotted name whose parent is missing
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"config error: model: package '{package}' is not installed; run `make venv`")
    path = Path(list(spec.submodule_search_locations)[0]) / folder
    if not path.is_dir():
        raise ConfigError(f"config error: model: no folder '{folder}' in package '{package}'")
    return str(path)


def check_model(model: str, base: Path = Path(".")) -> None:
    """A model is an existing folder or a well-formed Hub id; anything else
    (`a/b;touch X`, `a/b$(touch X)`, a mistyped path) stops here, at parse time."""
    if is_hub_id_form(model) or (base / model).is_dir() or Path(model).is_dir():
        return
    raise ConfigError(f"config error: model: {model!r} is neither a folder here nor a Hugging Face Hub id "
                      "(name or namespace/name: letters, digits, '-', '_', '.', at most 96 each, "
                      "no '--' or '..')")


def runs(config: dict) -> dict[str, dict]:
    """Expand the sweep: run name -> full config of that run (baseline first)."""
    try:
        expanded = sweeps.runs(config)
    except (sweeps.SweepError, ValueError) as err:
        raise ConfigError(str(err)) from None
    swept_tasks = {get_task(t).is_qa for t in (config.get("sweep") or {}).get("task", [])}
    if len(swept_tasks) > 1:  # one max_seq_length/doc_stride for all: 128 cuts SQuAD, 384 pads GLUE
        raise ConfigError("config error: sweep.task mixes SQuAD with GLUE tasks, whose train.max_seq_length "
                          "defaults differ (384 and 128); run them as two experiments")
    if "model" in (config.get("sweep") or {}):  # pkg:<package>/<folder> models, each resolved
        for run in expanded.values():
            run["model"] = resolve_model(run["model"])
    return expanded


def check_hostfile(config: dict, base: Path = Path(".")) -> None:
    """Every run's node count must fit the hostfile, whose names must be sane."""
    dist = config["distributed"]
    if dist["launcher"] == "srun":
        check_slurm_threads(config)
        return  # Slurm picks the nodes
    if not dist["hostfile"]:
        if max(config["sweep"].get("nodes", [dist["nodes"]])) > 1:
            raise ConfigError("config error: distributed.nodes > 1 needs distributed.hostfile (one node per line)")
        return
    try:
        for nodes in config["sweep"].get("nodes", [dist["nodes"]]):
            check_nodes(base / dist["hostfile"], nodes)
    except UserError as err:
        raise ConfigError(f"config error: {err}") from None


def cluster_threads(config: dict):
    """distributed.threads_per_process of the profile's cluster file (None without one)."""
    path = config.get("cluster")
    if not path or not Path(path).is_file():
        return None
    return ((yaml.safe_load(Path(path).read_text()) or {}).get("distributed") or {}).get("threads_per_process")


def check_slurm_threads(config: dict) -> None:
    """Slurm fixes --cpus-per-task when the job is submitted, before any
    node is seen: `auto` there is the cluster file's number (the job's
    --cpus-per-task); `tuned` cannot size it, nor can processes_per_node
    auto size --ntasks-per-node."""
    dist, fixed = config["distributed"], cluster_threads(config)
    if dist["threads_per_process"] == "auto" and isinstance(fixed, int):
        dist["threads_per_process"] = fixed
    for value in config["sweep"].get("threads_per_process", [dist["threads_per_process"]]):
        if not isinstance(value, int):
            raise ConfigError(f"config error: distributed.threads_per_process is {value}, but with launcher srun "
                              "Slurm allocates --cpus-per-task at submission; set a number in the profile's "
                              f"cluster file ({config.get('cluster') or 'profiles/slurm/cluster.yaml'}): "
                              "your nodes' cores / processes_per_node")
    if dist["processes_per_node"] == layout.AUTO and "processes_per_node" not in config["sweep"]:
        raise ConfigError("config error: distributed.processes_per_node is auto, but with launcher srun Slurm "
                          "allocates --ntasks-per-node at submission; set a number in the profile's cluster file "
                          f"({config.get('cluster') or 'profiles/slurm/cluster.yaml'}), e.g. the layout "
                          "`snakemake ... tune` measures on one node")


def check_hub(config: dict, base: Path = Path(".")) -> None:
    """What needs the Hub, asked before any job starts (the main process only):
    each Hub model can be fetched, deploy.push_to_hub can be uploaded."""
    models = {r["model"] for r in runs(config).values() if is_hub_id(r["model"])}
    for model in sorted(models):
        if problem := hub.model_problem(model, base / fetched_dir(config["experiment"], model)):
            raise ConfigError(problem)
    if problem := hub.push_problem(config["deploy"]["push_to_hub"]):
        raise ConfigError(problem)


def load_config(config: dict, base: Path = Path(".")) -> dict:
    """Everything the Snakefile needs: validated config and its runs."""
    config = validate(config)
    layout.normalize(config["distributed"])  # threads_per_process tuned: the measured layout
    for run in runs(config).values():  # each swept task's own files, each swept model
        check_data_files(run, base)
        check_model(resolve_model(run["model"]), base)
    if config["distributed"]["launcher"] == "srun":
        check_slurm_threads(config)  # `auto` becomes the cluster's cpus-per-task first
    try:
        apply_required_threads(config)
    except RecipeError as err:
        raise ConfigError(f"config error: {err}") from None
    check_hostfile(config, base)
    config["model"] = resolve_model(config["model"])
    return config
