"""Load a task's data from local files or from the Hugging Face Hub into the
same schema, so that nothing downstream knows where the data came from.

GLUE splits hold the task's ``text_columns`` plus ``label`` (a ClassLabel
over ``label_names``, or float32 for stsb), as ``nyu-mll/glue`` does without
its ``idx`` column. SQuAD splits hold ``id, title, context, question,
answers{text, answer_start}`` exactly as ``rajpurkar/squad(_v2)``; an
unanswerable v2 question has empty answer lists.

The local formats and their readers are in ``readers``; which formats fit a
task is ``tasks.formats_for``, shared with the config check.
"""

from __future__ import annotations

import contextlib
import importlib
import os

import datasets

from workflow.scripts.common.tasks import Task, formats_for, with_labels
from workflow.scripts.data import own
from workflow.scripts.data import hub_check
from workflow.scripts.data.errors import (DataError, DataFormatError, HubUnavailableError,
                                          MissingDataFileError)
from workflow.scripts.data.readers import FORMATS, SQUAD_COLUMNS, read_columns

__all__ = ["DataError", "DataFormatError", "FORMATS", "HubUnavailableError", "MissingDataFileError",
           "features", "load_hub", "load_local", "load_own_hub"]

# Why a format that exists does not fit the task (see tasks.formats_for).
_MISFIT = {
    "squad_json": "format squad_json is for squad/squad_v2, not {task}: use glue_tsv, csv, jsonl or parquet",
    "glue_tsv": "format glue_tsv is for GLUE tasks, not {task}: use squad_json, jsonl or parquet",
}


# ---------------------------------------------------------------- public API

def load_local(task: Task, files: dict[str, str], fmt: str, own_data=None
               ) -> datasets.DatasetDict:
    """Read the local ``files`` ({split: path}) of ``task`` in format ``fmt``.

    Split keys are ``train`` and ``validation``; for mnli ``validation`` means
    ``validation_matched`` and ``validation_mismatched`` may be given too.
    Keys whose path is None are skipped, so a config section can be passed
    as it is.
    """
    # Refuse unknown formats and formats that do not fit the task.
    if fmt not in FORMATS:
        raise DataFormatError(
            f"unknown data format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt not in formats_for(task, qa_columns=True):
        raise DataFormatError(_MISFIT[fmt].format(task=task.name))
    if task.own and fmt == "hub":
        return load_own_hub(task, own_data)
    if task.own:
        return load_own(task, _split_paths(task, files), fmt, own_data)
    splits = {}
    for split, path in _split_paths(task, files).items():
        columns = read_columns(task, path, fmt)
        splits[split] = datasets.Dataset.from_dict(columns, features(task))
    return datasets.DatasetDict(splits)


def load_own(task: Task, paths: dict[str, str], fmt: str, data) -> datasets.DatasetDict:
    """Own data: the configured columns, labels found in the training file
    (or data.label_names) and kept as the label feature's names."""
    columns = {split: own.columns(task, path, fmt, data) for split, path in paths.items()}
    first = 2 if data.header and fmt in ("csv", "tsv") else 1
    return _own_dataset(task, columns, data, {split: (path, first) for split, path in paths.items()})


def load_own_hub(task: Task, data) -> datasets.DatasetDict:
    """Own data from a Hub dataset (or a local dataset folder): data.train and
    data.validation name its splits; a ClassLabel column's names are the
    labels, in its order, as run_glue takes them."""
    names = {"train": data.train, task.validation_splits[0]: data.validation}
    raw = {split: _download_split(data, name) for split, name in names.items()}
    class_names = _class_names(raw["train"].features, data.label_column)
    places = {split: (f"{data.dataset}[{name}]", 1) for split, name in names.items()}
    columns = {split: own.rows_to_columns(task, _labels_as_names(ds, data.label_column, class_names),
                                          data, places[split][0], "row", 1)
               for split, ds in raw.items()}
    return _own_dataset(task, columns, data, places, class_names)


def _own_dataset(task: Task, columns: dict, data, places: dict, class_names=None) -> datasets.DatasetDict:
    """Label names -> ids over the training labels, as the ClassLabel feature."""
    given = tuple(map(str, data.label_names or ()))
    names = given or class_names or own.found_labels(columns["train"]["label"])
    task = with_labels(task, names)
    for split, (path, first) in places.items():
        columns[split]["label"] = own.to_ids(task, columns[split]["label"], names, path, first,
                                             data.label_column)
    schema = features(task, len(data.text_columns))
    return datasets.DatasetDict({split: datasets.Dataset.from_dict(c, schema) for split, c in columns.items()})


def _download_split(data, split: str) -> datasets.Dataset:
    try:
        return datasets.load_dataset(data.dataset, data.dataset_config, split=split)
    except _network_errors() as err:
        raise HubUnavailableError(
            f"cannot load dataset {data.dataset!r} from the Hugging Face Hub ({type(err).__name__}: no network, "
            "or no such dataset?): save it to parquet where there is network and set data.format: parquet"
        ) from err
    except ValueError as err:  # an unknown split or config
        raise DataError(f"dataset {data.dataset!r}: {err}; set data.train and data.validation to its "
                        "split names (and data.dataset_config)") from err


def _class_names(features_: datasets.Features, column) -> tuple[str, ...] | None:
    feature = features_.get(column)
    feature = getattr(feature, "feature", feature)  # a list of class labels (multi-label)
    return tuple(feature.names) if isinstance(feature, datasets.ClassLabel) else None


def _labels_as_names(ds: datasets.Dataset, column, class_names) -> list[dict]:
    """Rows, their class-label ids turned into names (own.raw_label reads names)."""
    rows = ds.to_list()
    if class_names:
        for row in rows:
            value = row.get(column)
            if isinstance(value, list):
                row[column] = [class_names[v] for v in value]
            elif isinstance(value, int) and value >= 0:
                row[column] = class_names[value]
    return rows


def load_hub(task: Task) -> datasets.DatasetDict:
    """Download ``task`` from the Hub, keeping train and validation splits and
    only the columns that load_local produces."""
    try:
        raw = datasets.load_dataset(task.hub_path, task.hub_config)
    except _network_errors() as err:
        name = "/".join(filter(None, (task.hub_path, task.hub_config)))
        raise HubUnavailableError(
            f"cannot download {name} from the Hugging Face Hub (no network?): "
            + hub_check.local_files_hint(task)) from err
    columns = list(features(task))
    return datasets.DatasetDict({
        split: raw[split].select_columns(columns)
        for split in ("train", *task.validation_splits) if split in raw})


def features(task: Task, text_columns: int | None = None) -> datasets.Features:
    """The HF schema of one split of ``task`` (own data: its first
    ``text_columns`` text columns)."""
    string = datasets.Value("string")
    if task.is_qa:
        answers = {"text": datasets.List(string),
                   "answer_start": datasets.List(datasets.Value("int32"))}
        return datasets.Features({**{c: string for c in SQUAD_COLUMNS[:4]},
                                  "answers": answers})
    label = (datasets.Value("float32") if task.is_regression
             else datasets.ClassLabel(names=list(task.label_names)))
    if task.multi_label:
        label = datasets.List(label)
    texts = task.text_columns[:text_columns] if text_columns else task.text_columns
    return datasets.Features({**{c: string for c in texts}, "label": label})


# ------------------------------------------------------------------ splits

def _split_paths(task: Task, files: dict[str, str]) -> dict[str, str]:
    """Map config keys to HF split names and check that each file exists."""
    # "validation" is the first validation split (validation_matched for mnli)
    aliases = {"train": "train", "validation": task.validation_splits[0]}
    aliases.update({s: s for s in task.validation_splits})
    paths = {}
    for key, path in files.items():
        if key not in aliases:
            raise DataError(f"unknown data split {key!r} for task {task.name}:"
                            f" use {', '.join(aliases)}")
        if path is None:
            continue
        if not os.path.isfile(path):
            raise MissingDataFileError(
                f"data file not found: {path} (split {key}): check the path")
        paths[aliases[key]] = os.fspath(path)
    if not paths:
        raise DataError(f"no data files given for task {task.name}: set"
                        " data.train and/or data.validation")
    return paths


def _network_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "the Hub is unreachable".

    OSError covers ConnectionError, requests' errors and huggingface_hub's
    OfflineModeIsEnabled / LocalEntryNotFoundError; the HTTP client's
    transport errors are not OSErrors, so they are added when installed.
    """
    errors: list[type[BaseException]] = [OSError]
    for module in ("httpx2", "httpx"):
        with contextlib.suppress(ImportError, AttributeError):
            errors.append(importlib.import_module(module).TransportError)
    return tuple(errors)
