"""Task metadata as data: one table from task name to hub location, input
columns, labels, metrics and validation splits.

The table is the single source of truth reused by the config schema's enum,
the data loaders, tokenization, training and evaluation, so that adding a task
means adding one row here (as in transformers' run_glue_no_trainer.py).
"""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def is_regression(self) -> bool:
        """True for tasks with one continuous label (stsb)."""
        return self.num_labels == 1

    @property
    def main_metric(self) -> str:
        """The metric used to compare runs: the first one listed."""
        return self.metrics[0]


def _glue(name, text_columns, label_names, metrics, layout, **kwargs) -> Task:
    """A GLUE row: all share the hub path and use the task name as config."""
    num_labels = len(label_names) or 1  # no names means regression
    return Task(name, GLUE_HUB_PATH, name, text_columns, num_labels,
                label_names, metrics, glue_tsv=layout, **kwargs)


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
)}


def formats_for(task: Task, qa_columns: bool = False) -> tuple[str, ...]:
    """Local data formats (config ``data.format``) that fit ``task``, its own
    archive format first; the config check and load_local both ask here.

    GLUE: glue_tsv, csv, jsonl, parquet. SQuAD: squad_json only, as the
    config takes it; with ``qa_columns`` also csv, jsonl and parquet, which
    load_local reads too.
    """
    columns = ("csv", "jsonl", "parquet")
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
