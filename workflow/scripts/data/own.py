"""A user's own labelled data (tasks classification, multi_label, regression):
the configured text and label columns of a csv, tsv, jsonl or parquet file,
renamed to ``text`` (and ``text_pair``) and ``label``; the labels found in
the training file as run_glue finds them (sorted; numbers in numeric order)
unless ``data.label_names`` gives them.

Multi-label cells: a list in jsonl and parquet, or one string with the
labels separated by commas in csv and tsv ("sports,politics"; empty = none).
Every error names the file, the line (the data row for parquet) and the column.

A Hub dataset (``data.format: hub``) names its splits in ``data.train`` and
``data.validation``; its ClassLabel names, when it has them, are the labels.
"""

from __future__ import annotations

import csv
import math

from workflow.scripts.common.tasks import OWN_TEXT_COLUMNS, Task
from workflow.scripts.data.errors import DataFormatError
from workflow.scripts.data.readers import _read_jsonl, _read_parquet

MULTI_LABEL_SEPARATOR = ","


def read_rows(path: str, fmt: str, header: bool) -> tuple[list[dict], int]:
    """(rows, line number of the first row): csv with quotes, tsv without
    (as GLUE's files need), header-less files keyed by 0-based position."""
    if fmt in ("jsonl", "parquet"):
        return (_read_jsonl(path) if fmt == "jsonl" else _read_parquet(path)), 1
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = (csv.reader(f) if fmt == "csv" else csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        lines = [line for line in reader]
    if header:
        names, lines = (lines[0] if lines else []), lines[1:]
        return [dict(zip(names, line)) for line in lines], 2
    return [dict(enumerate(line)) for line in lines], 1


def columns(task: Task, path: str, fmt: str, data) -> dict[str, list]:
    """text[, text_pair] and raw label values of a file, checked cell by cell."""
    rows, first = read_rows(path, fmt, data.header)
    if not rows:
        raise DataFormatError(f"{path}: the file has no data rows")
    return rows_to_columns(task, rows, data, path, "row" if fmt == "parquet" else "line", first)


def rows_to_columns(task: Task, rows: list[dict], data, path: str, where: str, first: int) -> dict[str, list]:
    """The checked columns of ``rows``; errors name ``path``, ``where`` (line
    or row) and the column."""
    out = {name: [] for name in OWN_TEXT_COLUMNS[:len(data.text_columns)]}
    out["label"] = []
    for i, row in enumerate(rows):
        place = f"{path}: {where} {first + i}"
        for name, column in zip(out, data.text_columns):
            value = cell(row, column, place, data.header)
            if value is None or not str(value).strip():
                raise DataFormatError(f"{place}, column {column!r}: empty text; fill it or drop the row")
            out[name].append(str(value))
        out["label"].append(raw_label(task, cell(row, data.label_column, place, data.header), place,
                                      data.label_column))
    return out


def cell(row: dict, column, place: str, header: bool):
    if column not in row:
        found = ", ".join(map(repr, row)) if header else f"{len(row)} columns (0-based)"
        raise DataFormatError(f"{place}: no column {column!r} (found {found}); set data.text_columns and "
                              "data.label_column to this file's columns" + ("" if header else
                                                                           " or data.header: true"))
    return row[column]


def raw_label(task: Task, value, place: str, column):
    """A float (regression), a list of names (multi-label) or a name."""
    if task.is_regression:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            raise DataFormatError(f"{place}, column {column!r}: label {value!r} is not a number: regression "
                                  "needs a float")
        return number
    if task.multi_label:
        items = value if isinstance(value, list) else str(value or "").split(MULTI_LABEL_SEPARATOR)
        return [name_of(v) for v in items if str(v).strip()]
    if value is None or str(value).strip() == "":
        raise DataFormatError(f"{place}, column {column!r}: empty label")
    return name_of(value)


def name_of(value) -> str:
    """A label's name: 1, 1.0 and "1" are the same class."""
    number = _number(value)
    return str(int(number)) if number is not None and number.is_integer() else str(value).strip()


def _number(value) -> float | None:
    try:
        return None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def found_labels(train_labels: list) -> tuple[str, ...]:
    """Sorted as run_glue sorts them: numbers in numeric order, else by name."""
    names = {n for value in train_labels for n in (value if isinstance(value, list) else [value])}
    if names and all(_number(n) is not None for n in names):
        return tuple(sorted(names, key=float))
    return tuple(sorted(names))


def to_ids(task: Task, labels: list, names: tuple[str, ...], path: str, first_line: int, column) -> list:
    """Label names -> ids; a name the training labels lack is an error."""
    if task.is_regression:
        return labels
    index = {n: i for i, n in enumerate(names)}
    out = []
    for i, value in enumerate(labels):
        for name in (value if isinstance(value, list) else [value]):
            if name not in index:
                raise DataFormatError(f"{path}: line {first_line + i}, column {column!r}: label {name!r} is not "
                                      f"among the training labels ({', '.join(names)}); fix it or set "
                                      "data.label_names")
        out.append([index[n] for n in value] if isinstance(value, list) else index[value])
    return out
