"""Task metadata as data: one table from task name to hub location, input
columns, labels, metrics and validation splits.

The table is the single source of truth reused by the config schema's enum,
the data loaders, tokenization, training and evaluation, so that adding a task
means adding one row here (as in transformers' run_glue_no_trainer.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GLUE_HUB_PATH = "nyu-mll/glue"


class UnknownTaskError(ValueError):
    """A task name that is not in TASKS."""


@dataclass(frozen=True)
class GlueTsvLayout:
    """Where a task's columns live in the original GLUE archive's TSV files
    (gluebenchmark.com), which local `glue_tsv` data is read from."""

    columns: tuple[tuple[str, str | int], ...]
    """(HF column name, TSV header name or 0-based index) pairs; a tuple of
    pairs rather than a dict so that the table stays immutable and hashable."""
    label: str | int
    """TSV header name (or index) of the gold label."""
    has_header: bool = True
    """CoLA's train.tsv/dev.tsv are the only files without a header line."""
    validation_files: tuple[str, ...] = ("dev.tsv",)
    """Archive file of each validation split, in validation_splits order."""


@dataclass(frozen=True)
class Task:
    """Everything the workflow needs to know about one task."""

    name: str
    """Short name used in config and paths (``mrpc``)."""
    hub_path: str
    """Hugging Face Hub dataset id (``nyu-mll/glue``)."""
    hub_config: str | None
    """Hub dataset configuration (``mrpc``); None when the dataset has none."""
    text_columns: tuple[str, ...]
    """Input text columns (HF names), in the order the tokenizer takes them."""
    num_labels: int
    """Classes; 1 means regression (stsb); 0 means extractive QA."""
    label_names: tuple[str, ...]
    """Class names in HF order: label id i is label_names[i]."""
    metrics: tuple[str, ...]
    """Metric names as Hugging Face reports them, main metric first."""
    validation_splits: tuple[str, ...] = ("validation",)
    """HF split names evaluated after training."""
    is_qa: bool = False
    """Extractive question answering (SQuAD) rather than classification."""
    glue_tsv: GlueTsvLayout | None = None
    """Layout in the original GLUE archive; None for non-GLUE tasks."""
    own: bool = False
    """A user's own data (classification, multi_label, regression): columns
    and labels come from the configuration and the training file."""
    multi_label: bool = False
    """Each example has any number of the labels (sigmoid outputs)."""
    chosen_metric: str | None = None
    """evaluation.metric: the one metric the report leads with and the deploy gate checks."""

    @property
    def is_regression(self) -> bool:
        """True for tasks with one continuous label (stsb, regression)."""
        return self.num_labels == 1 and not self.is_qa and not self.label_names

    @property
    def main_metric(self) -> str:
        """The metric used to compare runs: the first one listed."""
        return self.metrics[0]


def _glue(name, text_columns, label_names, metrics, layout, **kwargs) -> Task:
    """A GLUE row: all share the hub path and use the task name as config."""
    num_labels = len(label_names) or 1  # no names means regression
    return Task(name, GLUE_HUB_PATH, name, text_columns, num_labels,
                label_names, metrics, glue_tsv=layout, **kwargs)


# Own data: the text columns are renamed to these on loading (one or two).
OWN_TEXT_COLUMNS = ("text", "text_pair")


def _own(name: str, metrics: tuple[str, ...], num_labels: int = 0, multi_label: bool = False) -> Task:
    """An own-data row; its labels are filled in by with_labels."""
    return Task(name, None, None, OWN_TEXT_COLUMNS, num_labels, (), metrics, own=True, multi_label=multi_label)


def _squad(name: str, hub_path: str) -> Task:
    """A SQuAD row: question first, context second, as run_qa tokenizes."""
    return Task(name, hub_path, None, ("question", "context"), 0, (),
                ("f1", "exact_match"), is_qa=True)


def _layout(label, *columns, **kwargs) -> GlueTsvLayout:
    """Shorthand: ``_layout(tsv_label, (hf_column, tsv_column), ...)``."""
    return GlueTsvLayout(tuple(columns), label, **kwargs)


_PAIR = (("sentence1", "sentence1"), ("sentence2", "sentence2"))
_ENTAIL = ("entailment", "not_entailment")

TASKS: dict[str, Task] = {t.name: t for t in (
    _glue("cola", ("sentence",), ("unacceptable", "acceptable"),
          ("matthews_correlation",),
          _layout(1, ("sentence", 3), has_header=False)),
    _glue("sst2", ("sentence",), ("negative", "positive"), ("accuracy",),
          _layout("label", ("sentence", "sentence"))),
    _glue("mrpc", ("sentence1", "sentence2"), ("not_equivalent", "equivalent"),
          ("f1", "accuracy"),
          _layout("Quality", ("sentence1", "#1 String"),
                  ("sentence2", "#2 String"))),
    _glue("qqp", ("question1", "question2"), ("not_duplicate", "duplicate"),
          ("f1", "accuracy"),
          _layout("is_duplicate", ("question1", "question1"),
                  ("question2", "question2"))),
    _glue("stsb", ("sentence1", "sentence2"), (), ("pearson", "spearmanr"),
          _layout("score", *_PAIR)),
    _glue("mnli", ("premise", "hypothesis"),
          ("entailment", "neutral", "contradiction"), ("accuracy",),
          _layout("gold_label", ("premise", "sentence1"),
                  ("hypothesis", "sentence2"),
                  validation_files=("dev_matched.tsv", "dev_mismatched.tsv")),
          validation_splits=("validation_matched", "validation_mismatched")),
    _glue("qnli", ("question", "sentence"), _ENTAIL, ("accuracy",),
          _layout("label", ("question", "question"),
                  ("sentence", "sentence"))),
    _glue("rte", ("sentence1", "sentence2"), _ENTAIL, ("accuracy",),
          _layout("label", *_PAIR)),
    # WNLI's archive labels are 0/1 with 1 = entailment, hence this order.
    _glue("wnli", ("sentence1", "sentence2"), ("not_entailment", "entailment"),
          ("accuracy",), _layout("label", *_PAIR)),
    _squad("squad", "rajpurkar/squad"),
    _squad("squad_v2", "rajpurkar/squad_v2"),
    _own("classification", ("accuracy", "f1_macro")),
    _own("multi_label", ("f1_micro", "f1_macro", "subset_accuracy"), multi_label=True),
    _own("regression", ("pearson", "spearmanr", "mse"), num_labels=1),
)}


def with_labels(task: Task, label_names, main_metric: str | None = None) -> Task:
    """An own-data task with its labels (found in the training file or
    given); two classes add the binary f1. `main_metric` (evaluation.metric)
    goes first, where reports and the deploy gate look."""
    metrics = task.metrics
    if task.own and not task.is_regression:
        names = tuple(str(n) for n in label_names)
        binary = ("f1",) if len(names) == 2 and not task.multi_label else ()
        task = replace(task, label_names=names, num_labels=len(names))
        metrics = (*task.metrics, *binary)
    if main_metric:
        if main_metric not in metrics:
            raise ValueError(f"evaluation.metric {main_metric!r} is not a metric of task {task.name}: "
                             f"use one of {', '.join(metrics)}")
        metrics = (main_metric, *(m for m in metrics if m != main_metric))
    return replace(task, metrics=metrics, chosen_metric=main_metric)


def labels_in(features) -> tuple[str, ...]:
    """Class names of a dataset's label column (ClassLabel, or a list of them)."""
    for column in ("labels", "label"):
        feature = features.get(column) if features is not None else None
        feature = getattr(feature, "feature", feature)  # List(ClassLabel) for multi-label
        if hasattr(feature, "names"):
            return tuple(feature.names)
    return ()


def for_data(name: str, features=None, main_metric: str | None = None) -> Task:
    """The task as a stage sees it: own tasks take their labels from the
    data's features; every task takes evaluation.metric."""
    task = get_task(name)
    return with_labels(task, labels_in(features), main_metric) if task.own or main_metric else task


def formats_for(task: Task, qa_columns: bool = False) -> tuple[str, ...]:
    """Local data formats (config ``data.format``) that fit ``task``, its own
    archive format first; the config check and load_local both ask here.

    GLUE: glue_tsv, csv, jsonl, parquet. Own data: csv, tsv, jsonl,
    parquet, or hub (a Hub dataset's splits). SQuAD: squad_json only, as the
    config takes it; with ``qa_columns`` also csv, jsonl and parquet, which
    load_local reads too.
    """
    columns = ("csv", "jsonl", "parquet")
    if task.own:
        return ("csv", "tsv", "jsonl", "parquet", "hub")
    if task.is_qa:
        return ("squad_json", *columns) if qa_columns else ("squad_json",)
    return ("glue_tsv", *columns) if task.glue_tsv else columns


def get_task(name: str) -> Task:
    """Look a task up by name, failing with the list of allowed names."""
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise UnknownTaskError(
            f"unknown task {name!r}: use one of {', '.join(TASKS)}") from None


# The folder of each GLUE task in the original archive (download_glue_data.py),
# which data.glue_dir points at, as run_glue's --data_dir did.
GLUE_ARCHIVE_FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "qqp": "QQP", "stsb": "STS-B",
                        "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}


def glue_archive_files(task: Task, glue_dir: str) -> dict[str, str]:
    """data.train / validation (/ validation_mismatched) of `task` inside a
    GLUE archive folder: `<glue_dir>/MRPC/train.tsv`, `.../MNLI/dev_matched.tsv`."""
    if task.name not in GLUE_ARCHIVE_FOLDERS:
        raise ValueError(f"config error: data.glue_dir holds GLUE tasks; {task.name} is not one "
                         "(give data.train and data.validation)")
    folder = f"{glue_dir.rstrip('/')}/{GLUE_ARCHIVE_FOLDERS[task.name]}"
    keys = ("validation", "validation_mismatched")
    files = {"train": f"{folder}/train.tsv"}
    files.update({k: f"{folder}/{name}" for k, name in zip(keys, task.glue_tsv.validation_files)})
    return files
