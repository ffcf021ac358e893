"""Per-format readers of local data files, and the checks that turn their
rows into the columns of a task's HF schema.

Local formats: ``glue_tsv`` (the original GLUE archive files), ``csv``,
``jsonl`` and ``parquet`` (HF column names; labels as ids or names; SQuAD
``answers`` as a JSON object, in csv a JSON string) and ``squad_json`` (the
official SQuAD v1.1/v2.0 files). Every error names the file and what to fix.
"""

from __future__ import annotations

import csv
import json
import logging
import math

from workflow.scripts.common.tasks import Task
from workflow.scripts.data.errors import DataFormatError

FORMATS = ("glue_tsv", "csv", "tsv", "jsonl", "parquet", "squad_json", "hub")
SQUAD_COLUMNS = ("id", "title", "context", "question", "answers")

log = logging.getLogger(__name__)


def read_columns(task: Task, path: str, fmt: str) -> dict[str, list]:
    """Read one file and return its columns in the task's HF schema."""
    if fmt == "squad_json":
        rows = _read_squad_json(path)
    elif fmt == "glue_tsv":
        rows = _read_glue_tsv(task, path)
    else:
        rows = _READERS[fmt](path)
    if not rows:
        raise DataFormatError(f"{path}: the file has no data rows: check that"
                              f" it is the right file for format {fmt}")
    if task.is_qa:
        return _squad_columns(task, rows, path)
    return _glue_columns(task, rows, path)


# ------------------------------------------------------------------ readers

def _read_csv(path: str) -> list[dict]:
    """Rows of a csv file with a header line; everything stays a string."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        return list(csv.DictReader(f))


def _read_jsonl(path: str) -> list[dict]:
    """Rows of a JSON-lines file (one object per line; blank lines skipped)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataFormatError(f"{path}: line {number} is not valid"
                                      f" JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise DataFormatError(f"{path}: line {number} is not a JSON"
                                      " object: write one object per line")
            rows.append(row)
    return rows


def _read_parquet(path: str) -> list[dict]:
    """Rows of a parquet file."""
    import pyarrow.parquet as pq  # installed with datasets

    try:
        return pq.read_table(path).to_pylist()
    except Exception as err:  # pyarrow raises several unrelated types
        raise DataFormatError(f"{path}: not a readable parquet file"
                              f" ({err})") from None


_READERS = {"csv": _read_csv, "jsonl": _read_jsonl, "parquet": _read_parquet}


def _read_glue_tsv(task: Task, path: str) -> list[dict]:
    """Rows of an original GLUE archive file, renamed to HF column names.

    Quoting is disabled because sentences contain unbalanced quote chars.
    Like the Hub loader, rows with missing fields or an empty label are
    skipped (the archive has a few corrupted lines), with a warning.
    """
    layout = task.glue_tsv
    wanted = {**dict(layout.columns), "label": layout.label}
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None) if layout.has_header else None
        lines = list(reader)
    if header is None:
        if layout.has_header or not lines:
            return []
        header = list(range(max(map(len, lines))))  # positions as names
    _check_columns(path, header, wanted.values())
    index = {name: header.index(col) for name, col in wanted.items()}
    rows = [{name: line[i] for name, i in index.items()}
            for line in lines if len(line) > max(index.values())
            and line[index["label"]] != ""]
    if len(rows) < len(lines):
        log.warning("%s: skipped %d corrupted line(s) with missing fields",
                    path, len(lines) - len(rows))
    return rows


def _read_squad_json(path: str) -> list[dict]:
    """Rows of an official SQuAD v1.1/v2.0 file (data/paragraphs/qas)."""
    try:
        with open(path, encoding="utf-8") as f:
            articles = json.load(f)["data"]
        return [_squad_row(article, paragraph, qa)
                for article in articles
                for paragraph in article["paragraphs"]
                for qa in paragraph["qas"]]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise DataFormatError(
            f"{path}: not an official SQuAD JSON file ({type(err).__name__}:"
            f" {err}): expected data -> paragraphs -> qas with id, question,"
            " answers") from None


def _squad_row(article: dict, paragraph: dict, qa: dict) -> dict:
    """One question as an HF squad row; v2 impossible questions get none."""
    answers = [] if qa.get("is_impossible") else qa["answers"]
    return {"id": qa["id"], "title": article.get("title", ""),
            "context": paragraph["context"], "question": qa["question"],
            "answers": {"text": [a["text"] for a in answers],
                        "answer_start": [a["answer_start"] for a in answers]}}


# ---------------------------------------------------------------- checking

def _check_columns(path: str, found, expected) -> None:
    """Fail naming the file, the columns found and the columns expected."""
    found, expected = list(found), list(expected)
    if not set(expected) <= set(found):
        raise DataFormatError(
            f"{path}: found columns {found}, expected columns {expected}:"
            " check data.format and that the file belongs to this task")


def _glue_columns(task: Task, rows: list[dict], path: str) -> dict[str, list]:
    """Columns text_columns + label, with labels parsed to ids or floats."""
    _check_columns(path, rows[0], (*task.text_columns, "label"))
    columns = {c: [_text(row, c, path, i) for i, row in enumerate(rows)]
               for c in task.text_columns}
    columns["label"] = [_label(task, row.get("label"), path) for row in rows]
    return columns


def _squad_columns(task: Task, rows: list[dict], path: str
                   ) -> dict[str, list]:
    """Columns of SQUAD_COLUMNS; title is optional and defaults to ''."""
    _check_columns(path, rows[0], ("id", "context", "question", "answers"))
    columns = {c: [_text(row, c, path, i, default="")
                   for i, row in enumerate(rows)]
               for c in SQUAD_COLUMNS[:4]}
    columns["answers"] = [_answers(task, row, path) for row in rows]
    return columns


def _text(row: dict, column: str, path: str, index: int,
          default: str | None = None) -> str:
    """A text cell as a string; a missing value is an error."""
    value = row.get(column, default)
    if value is None:
        raise DataFormatError(f"{path}: data row {index + 1} has no value in"
                              f" column {column!r}: fill it or drop the row")
    return str(value)


def _label(task: Task, value, path: str) -> int | float:
    """A label as a float (regression) or class id; names are mapped through
    label_names; anything else out of range is an error."""
    if task.is_regression:
        number = _number(value)
        if number is None or not math.isfinite(number):
            raise DataFormatError(f"{path}: label {value!r} is not a number:"
                                  f" {task.name} needs a float score")
        return number
    number = _number(value)
    if number is not None and number.is_integer():
        label = int(number)
    else:
        label = task.label_names.index(value) if value in task.label_names \
            else -1
    if not 0 <= label < task.num_labels:
        raise DataFormatError(
            f"{path}: label {value!r} is out of range for {task.name}: use"
            f" 0..{task.num_labels - 1} or {', '.join(task.label_names)}")
    return label


def _number(value) -> float | None:
    """float(value), or None when it is not a number (bools are not)."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _answers(task: Task, row: dict, path: str) -> dict:
    """The answers cell as {text: [...], answer_start: [...]}."""
    answers = row["answers"]
    if isinstance(answers, str):  # csv cells hold JSON text
        try:
            answers = json.loads(answers)
        except json.JSONDecodeError:
            answers = None
    try:
        texts = [str(t) for t in answers["text"]]
        starts = [int(s) for s in answers["answer_start"]]
    except (TypeError, KeyError, ValueError):
        raise DataFormatError(
            f"{path}: answers of question {row.get('id')!r} is {answers!r}:"
            ' expected {"text": [...], "answer_start": [...]}') from None
    if len(texts) != len(starts):
        raise DataFormatError(f"{path}: question {row.get('id')!r} has"
                              f" {len(texts)} answer texts but {len(starts)}"
                              " answer_start values")
    if not texts and task.name == "squad":
        raise DataFormatError(
            f"{path}: question {row.get('id')!r} has no answer: squad needs"
            " one per question; use task squad_v2 for unanswerable ones")
    return {"text": texts, "answer_start": starts}
