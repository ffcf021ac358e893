"""Tiny datasets in each task's native local format, for tests.

GLUE tasks are written as the original GLUE archive writes them (every
column of the real files, CoLA without a header, MNLI's two dev files,
word labels where the archive has words); SQuAD as the official JSON.
The label follows a cue word in the text, so a few steps can learn it.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

from workflow.scripts.data import demo

WORDS = ("river", "market", "teacher", "garden", "engine", "letter", "window", "doctor", "city", "song")

# Archive header and a row builder (index, sentence a, sentence b, label) per task.
ARCHIVE = {
    "cola": (None, lambda i, a, b, y: ("gj04", y, "" if y else "*", a)),
    "sst2": (("sentence", "label"), lambda i, a, b, y: (a, y)),
    "mrpc": (("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
             lambda i, a, b, y: (y, 1000 + i, 2000 + i, a, b)),
    "qqp": (("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
            lambda i, a, b, y: (i, 2 * i, 2 * i + 1, a + "?", b + "?", y)),
    "stsb": (("index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
              "sentence2", "score"),
             lambda i, a, b, y: (i, "main-news", "2012", "2012test", i, "none", "none", a, b, f"{5.0 * y:.3f}")),
    "mnli": (("index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
              "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "label1", "gold_label"),
             lambda i, a, b, y: (i, i, f"{i}e", "fiction", "( a )", "( b )", "(ROOT a)", "(ROOT b)", a, b,
                                 ("entailment", "neutral", "contradiction")[y],
                                 ("entailment", "neutral", "contradiction")[y])),
    "qnli": (("index", "question", "sentence", "label"),
             lambda i, a, b, y: (i, a + "?", b, ("entailment", "not_entailment")[y])),
    "rte": (("index", "sentence1", "sentence2", "label"),
            lambda i, a, b, y: (i, a, b, ("entailment", "not_entailment")[y])),
    "wnli": (("index", "sentence1", "sentence2", "label"), lambda i, a, b, y: (i, a, b, y)),
}
CLASSES = {"mnli": 3, "stsb": 2}  # stsb: scores 0.0 or 5.0


def _rows(task: str, n: int, rng: random.Random) -> list[tuple]:
    build = ARCHIVE[task][1]
    rows = []
    for i in range(n):
        label = i % CLASSES.get(task, 2)
        cue = ("good", "fine", "bad")[label]
        words = rng.sample(WORDS, 4)
        rows.append(build(i, f"The {words[0]} and the {words[1]} are {cue}",
                          f"A {words[2]} near the {words[3]} seems {cue}", label))
    rng.shuffle(rows)
    return rows


def _write_tsv(path: Path, header, rows) -> str:
    lines = ([header] if header else []) + rows
    path.write_text("".join("\t".join(map(str, row)) + "\n" for row in lines), encoding="utf-8")
    return str(path)


def write_native(task: str, out: Path, n_train: int = 48, n_dev: int = 16, seed: int = 0) -> dict:
    """Write `task`'s files into `out`; returns the config's `data` section."""
    out.mkdir(parents=True, exist_ok=True)
    if task in ("classification", "multi_label", "regression"):
        return write_own(task, out, n_train, n_dev, seed)
    if task in ("squad", "squad_v2"):
        train, dev = demo.write_squad_demo(out, n_train=n_train, n_dev=n_dev, seed=seed,
                                           version_2=task == "squad_v2")
        return {"format": "squad_json", "train": str(train), "validation": str(dev)}
    rng = random.Random(f"{task}-{seed}")
    header = ARCHIVE[task][0]
    data = {"format": "glue_tsv", "train": _write_tsv(out / "train.tsv", header, _rows(task, n_train, rng))}
    if task == "mnli":
        data["validation"] = _write_tsv(out / "dev_matched.tsv", header, _rows(task, n_dev, rng))
        data["validation_mismatched"] = _write_tsv(out / "dev_mismatched.tsv", header, _rows(task, n_dev, rng))
    else:
        data["validation"] = _write_tsv(out / "dev.tsv", header, _rows(task, n_dev, rng))
    return data


# Own data: a 3-class csv with labels 1-3 (a header), a multi-label jsonl
# (label lists) and a regression tsv without a header (columns by position).
CUES = ("good", "fine", "bad")


def _own_rows(n: int, rng: random.Random) -> list[tuple[str, str, int]]:
    rows = []
    for i in range(n):
        words = rng.sample(WORDS, 4)
        label = i % 3
        rows.append((f"The {words[0]} and the {words[1]} are {CUES[label]}",
                     f"A {words[2]} near the {words[3]} seems {CUES[label]}", label))
    return rows


def write_own(task: str, out: Path, n_train: int = 48, n_dev: int = 16, seed: int = 0) -> dict:
    """Own-data files for task classification, multi_label or regression; the config's data section."""
    rng = random.Random(f"{task}-{seed}")
    files = {}
    for split, n in (("train", n_train), ("validation", n_dev)):
        rows = _own_rows(n, rng)
        if task == "classification":
            path = out / f"{split}.csv"
            with open(path, "w", newline="") as f:
                rows = [(i, a, y + 1) for i, (a, _, y) in enumerate(rows)]
                csv.writer(f).writerows([("id", "review", "stars"), *rows])
        elif task == "multi_label":
            path = out / f"{split}.jsonl"
            path.write_text("".join(json.dumps({"text": f"{a}{' twice' * (i % 2)}",
                                                "tags": [CUES[y]] + ["twice"] * (i % 2)}) + "\n"
                                    for i, (a, _, y) in enumerate(rows)))
        else:
            path = out / f"{split}.tsv"
            path.write_text("".join(f"{a}\t{b}\t{2.5 * y:.2f}\n" for a, b, y in rows))
        files[split] = str(path)
    columns = {"classification": {"format": "csv", "text_columns": ["review"], "label_column": "stars"},
               "multi_label": {"format": "jsonl", "text_columns": ["text"], "label_column": "tags"},
               "regression": {"format": "tsv", "header": False, "text_columns": [0, 1], "label_column": 2}}
    return {**columns[task], **files}
