"""The accuracy table of a sweep over task and seed, as NLP papers report it.

One row per model (and per other swept recipe key), one column per task with
its official metric(s); each cell is the mean and std over seeds at the
learning rate chosen on dev (the best mean over seeds, as the BERT paper
chose from {5e-5, 4e-5, 3e-5, 2e-5}); the GLUE score averages the tasks
present, a task with two metrics counting as their average (GLUE's own
convention). Figures are in percent, as papers print them. Pure functions:
no files, no processes (render and tests call them the same way).
"""

from __future__ import annotations

import statistics

from workflow.scripts.settings.sweep import model_label, number, part

# GLUE's column order (gluebenchmark.com leaderboard), then SQuAD.
GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
TASK_ORDER = (*GLUE_TASKS, "squad", "squad_v2")
# The official metric(s) of each task, as evaluate writes them (MNLI's
# mismatched dev set as accuracy_mm); accuracy for the others.
OFFICIAL = {"cola": ("matthews_correlation",), "mrpc": ("f1", "accuracy"), "qqp": ("f1", "accuracy"),
            "stsb": ("pearson", "spearmanr"), "mnli": ("accuracy", "accuracy_mm"),
            "squad": ("exact_match", "f1"), "squad_v2": ("exact_match", "f1")}
SHORT = {"matthews_correlation": "MCC", "f1": "F1", "accuracy": "acc", "accuracy_mm": "mm",
         "pearson": "Pearson", "spearmanr": "Spearman", "exact_match": "EM"}
# Not row keys: seeds make up a cell, the rate is chosen per cell, tasks are columns.
NOT_ROWS = ("task", "seed", "learning_rate")


def wanted(sweep: dict | None) -> bool:
    """An experiment gets the table when its sweep varies task or seed."""
    return bool(sweep) and ("task" in sweep or "seed" in sweep)


def metrics_of(task: str) -> tuple[str, ...]:
    return OFFICIAL.get(task, ("accuracy",))


def percent(task: str, value) -> float | None:
    """A metric as papers print it: 0.875 -> 87.5 (SQuAD's EM/F1 are percent already)."""
    if value is None:
        return None
    return value if task.startswith("squad") else 100.0 * value


def run_scores(task: str, metrics: dict) -> dict | None:
    """{metric: percent} of one run, plus `score` (their mean); None if one is missing."""
    values = {m: percent(task, metrics.get(m)) for m in metrics_of(task)}
    if any(v is None for v in values.values()):
        return None
    return {**values, "score": statistics.fmean(values.values())}


def row_label(values: dict, base_model: str) -> str:
    """The row of a run: its model, then any other swept recipe key (`bs32`)."""
    label = model_label(values.get("model", base_model))
    extra = [part(k, v) for k, v in values.items() if k not in (*NOT_ROWS, "model")]
    return " ".join([label, *extra])


def group(planned: dict, results: dict, base: dict) -> dict:
    """(row, task) -> lr -> [(seed, scores or None)], over every planned run."""
    cells: dict = {}
    for run, values in planned.items():
        task = values.get("task", base["task"])
        key = (row_label(values, base["model"]), task)
        lr = values.get("learning_rate", base.get("learning_rate"))
        metrics = results.get(run)
        scores = run_scores(task, metrics) if metrics is not None else None
        cells.setdefault(key, {}).setdefault(lr, []).append((values.get("seed", base.get("seed")), scores))
    return cells


def mean_std(values: list[float]) -> dict:
    """Mean and sample std (None with one value), both rounded to 0.01."""
    std = statistics.stdev(values) if len(values) > 1 else None
    return {"mean": round(statistics.fmean(values), 2), "std": None if std is None else round(std, 2)}


def choose_rate(by_lr: dict) -> tuple | None:
    """The learning rate whose runs have the best mean score over their seeds
    (ties: the first listed); None when no run of the cell has finished."""
    best, best_mean = None, None
    for lr, seeds in by_lr.items():
        done = [s["score"] for _, s in seeds if s]
        if done and (best_mean is None or statistics.fmean(done) > best_mean):
            best, best_mean = lr, statistics.fmean(done)
    return None if best_mean is None else (best,)


def cell(task: str, by_lr: dict) -> dict:
    """A table cell: mean ± std per metric at the chosen rate, n of n planned."""
    planned = max(len(seeds) for seeds in by_lr.values())
    chosen = choose_rate(by_lr)
    if chosen is None:
        return {"task": task, "missing": True, "n": 0, "planned": planned}
    done = [(seed, s) for seed, s in by_lr[chosen[0]] if s]
    stats = {m: mean_std([s[m] for _, s in done]) for m in (*metrics_of(task), "score")}
    return {"task": task, "missing": False, "learning_rate": chosen[0], "n": len(done), "planned": planned,
            "metrics": stats, "seeds": [{"seed": seed, "score": round(s["score"], 2)} for seed, s in done]}


def glue_score(row_cells: dict) -> dict:
    """The average over the GLUE tasks present (two-metric tasks as their
    mean) and the GLUE tasks the row lacks."""
    present = [t for t in GLUE_TASKS if t in row_cells and not row_cells[t]["missing"]]
    score = statistics.fmean(row_cells[t]["metrics"]["score"]["mean"] for t in present) if present else None
    return {"score": None if score is None else round(score, 2), "tasks": present,
            "missing": [t for t in GLUE_TASKS if t not in present]}


def published_cell(published: dict, row: str, task: str, stats: dict | None) -> dict | None:
    """The paper's figure(s) for a cell and our difference (ours - theirs)."""
    given = ((published or {}).get("table") or {}).get(row, {}).get(task)
    if given is None:
        return None
    pairs = given.items() if isinstance(given, dict) else [("score", given)]
    out = {}
    for metric, value in pairs:
        ours = (stats or {}).get(metric, {}).get("mean") if stats else None
        out[metric] = {"value": value, "diff": None if ours is None else round(ours - value, 2)}
    return out


def build(planned: dict, results: dict, base: dict, published: dict | None = None) -> dict:
    """The table: rows (label, cells by task, GLUE score, published) and tasks.

    planned: run -> its swept values; results: run -> eval metrics (absent
    runs: not finished); base: the experiment's task, model, seed and rate."""
    cells = group(planned, results, base)
    tasks = sorted({t for _, t in cells}, key=lambda t: TASK_ORDER.index(t) if t in TASK_ORDER else 99)
    rows = []
    for label in dict.fromkeys(r for r, _ in cells):
        row_cells = {t: cell(t, cells[(label, t)]) for t in tasks if (label, t) in cells}
        for task, c in row_cells.items():
            c["published"] = published_cell(published, label, task, c.get("metrics"))
        glue = glue_score(row_cells)
        glue["published"] = published_cell(published, label, "score", {"score": {"mean": glue["score"]}})
        rows.append({"row": label, "cells": row_cells, "glue": glue})
    missing_runs = sorted(r for r in planned if results.get(r) is None)
    return {"tasks": list(tasks), "metrics": {t: list(metrics_of(t)) for t in tasks}, "rows": rows,
            "missing_runs": missing_runs, "note": note(tasks, missing_runs),
            "learning_rates": [number(lr) for lr in dict.fromkeys(v.get("learning_rate") for v in planned.values())
                               if lr is not None]}


def note(tasks: list, missing_runs: list) -> str:
    """What the table lacks: GLUE tasks not in the sweep, runs without a result."""
    parts = []
    absent = [t for t in GLUE_TASKS if t not in tasks]
    glue_present = [t for t in tasks if t in GLUE_TASKS]
    if glue_present and absent:
        parts.append(f"GLUE score over {len(glue_present)} of 9 tasks; missing: {', '.join(absent)}")
    if missing_runs:
        parts.append(f"{len(missing_runs)} runs have no result yet (cells show n of planned)")
    return "; ".join(parts)
