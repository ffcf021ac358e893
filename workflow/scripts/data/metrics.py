"""GLUE and SQuAD metrics, computed as Hugging Face `evaluate` and the
official SQuAD v1.1 / v2.0 scripts define them.

GLUE metrics are fractions in [0, 1] (as `evaluate`'s glue); SQuAD metrics
are percentages in [0, 100] (as the official scripts). All values are plain
Python numbers so that they can go straight into summary.json.
"""

from __future__ import annotations

import re
import string
from collections import Counter

import numpy as np

from workflow.scripts.common.tasks import get_task


class MetricsError(ValueError):
    """Predictions and references cannot be scored together."""


# -------------------------------------------------------------------- GLUE

def glue_metrics(task, predictions, references) -> dict[str, float]:
    """The task's metrics (tasks.Task.metrics) for class ids, floats
    (regression) or multi-hot rows (multi-label). mnli gives accuracy:
    score matched and mismatched separately. `task`: a Task or its name."""
    task = get_task(task) if isinstance(task, str) else task
    task_name = task.name
    if task.is_qa:
        raise MetricsError(f"{task_name} is a QA task: use squad_metrics")
    preds, refs = np.asarray(predictions), np.asarray(references)
    if preds.shape != refs.shape or preds.ndim != (2 if task.multi_label else 1) or preds.size == 0:
        raise MetricsError(
            f"{task_name}: {preds.shape} predictions vs {refs.shape}"
            " references: pass two equally long, non-empty 1-D sequences")
    return {name: float(_GLUE_METRICS[name](preds, refs))
            for name in task.metrics}


# The classification and correlation metrics are written out in numpy, as
# scikit-learn (f1_score, matthews_corrcoef) and scipy (pearsonr, spearmanr)
# define them (tests/unit/test_metrics.py checks them against both): every
# evaluating process imports this module, and importing those two libraries
# cost 2-4 s per process.
def _f_score(tp, fp, fn):
    """F1 = 2tp / (2tp + fp + fn), per entry; 0 where nothing was predicted or
    true (scikit-learn's zero_division=0, its default's value)."""
    tp = np.asarray(tp, np.float64)
    denominator = 2.0 * tp + fp + fn
    return np.divide(2.0 * tp, denominator, out=np.zeros_like(denominator), where=denominator > 0)


def _counts(p, r, labels):
    """Per label: (true positives, false positives, false negatives); p and r are
    class ids ([rows]) or multi-hot rows ([rows, labels])."""
    if p.ndim == 2:
        predicted, true = p.astype(bool), r.astype(bool)
    else:
        predicted, true = p[:, None] == labels, r[:, None] == labels
    return (predicted & true).sum(0), (predicted & ~true).sum(0), (~predicted & true).sum(0)


def _labels(p, r):
    """The labels scikit-learn averages over: those in either ([rows]) or every column."""
    return np.arange(p.shape[1]) if p.ndim == 2 else np.union1d(p, r)


def _f1_binary(p, r):
    """Binary F1 of the positive class 1."""
    return float(_f_score(*_counts(p, r, np.array([1])))[0])


def _f1_macro(p, r):
    return float(_f_score(*_counts(p, r, _labels(p, r))).mean())


def _f1_micro(p, r):
    return float(_f_score(*(counts.sum() for counts in _counts(p, r, _labels(p, r)))))


def _matthews(p, r):
    """Multi-class MCC from the confusion matrix (scikit-learn's form); 0 where
    either side has a single class."""
    labels = _labels(p, r)
    confusion = np.array([[np.sum((r == t) & (p == q)) for q in labels] for t in labels], dtype=float)
    true_sum, pred_sum, n = confusion.sum(1), confusion.sum(0), confusion.sum()
    cov_tp = np.trace(confusion) * n - true_sum @ pred_sum
    cov_pp, cov_tt = n * n - pred_sum @ pred_sum, n * n - true_sum @ true_sum
    return 0.0 if cov_pp * cov_tt == 0 else float(cov_tp / np.sqrt(cov_tt * cov_pp))


def _pearson(p, r):
    """Pearson's r (nan for a constant side, as scipy's pearsonr)."""
    x, y = np.asarray(p, np.float64), np.asarray(r, np.float64)
    x, y = x - x.mean(), y - y.mean()
    norm = np.sqrt((x @ x) * (y @ y))
    return float("nan") if norm == 0 else float(np.clip((x @ y) / norm, -1.0, 1.0))


def _average_ranks(values):
    """1-based ranks, ties sharing their mean rank (scipy's rankdata 'average')."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(values)]
    ranks = np.empty(len(values))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def _spearman(p, r):
    return _pearson(_average_ranks(p), _average_ranks(r))


# Each takes (predictions, references), as evaluate's glue does.
_GLUE_METRICS = {
    "accuracy": lambda p, r: (p == r).mean(),
    "f1": _f1_binary,
    "matthews_correlation": _matthews,
    "pearson": _pearson,
    "spearmanr": _spearman,
    "mse": lambda p, r: ((p - r) ** 2).mean(),
    "f1_macro": _f1_macro,
    "f1_micro": _f1_micro,
    "subset_accuracy": lambda p, r: (p == r).all(axis=1).mean(),  # every label of a row right
}


# ------------------------------------------------------------------- SQuAD

def normalize_answer(text: str) -> str:
    """Official SQuAD normalization: lower case, drop punctuation, drop the
    articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def squad_metrics(predictions: dict[str, str], references: list[dict],
                  no_answer_probability: dict[str, float] | None = None,
                  no_answer_threshold: float = 1.0,
                  version_2: bool | None = None) -> dict[str, float]:
    """exact_match and f1 (0-100), best over each question's gold answers.

    references are rows with ``id`` and ``answers`` ({"text": [...], ...}).
    version_2 (default: whether any question has no gold answer) scores as
    the official v2.0 script: "" matches an unanswerable question, and the
    HasAns_* / NoAns_* breakdown is added. With no_answer_probability
    ({id: p}), a question with p > no_answer_threshold counts as answered
    "no answer", as the official v2.0 script's --na-prob-thresh.
    """
    golds = {ref["id"]: list(ref["answers"]["text"]) for ref in references}
    _check_ids(predictions, golds)
    if version_2 is None:
        version_2 = any(not texts for texts in golds.values())
    exact, f1 = {}, {}
    for qid, texts in golds.items():
        exact[qid], f1[qid] = _best_scores(predictions[qid], texts, version_2)
        if (no_answer_probability or {}).get(qid, 0.0) > no_answer_threshold:
            exact[qid] = f1[qid] = float(not texts)
    result = _averages(exact, f1, golds)
    if version_2:
        for prefix, answerable in (("HasAns", True), ("NoAns", False)):
            subset = [q for q, texts in golds.items()
                      if bool(texts) == answerable]
            result.update(_averages(exact, f1, subset, prefix + "_"))
    return result


def _check_ids(predictions: dict, golds: dict) -> None:
    """Every reference needs a prediction (the official v1.1 script would
    silently score it 0, hiding a bug in post-processing)."""
    missing = [qid for qid in golds if qid not in predictions]
    if not golds or missing:
        raise MetricsError(
            f"{len(missing)} of {len(golds)} questions have no prediction"
            f" (first: {missing[:1]}): predict every reference id")


def _best_scores(prediction: str, gold_texts: list[str], version_2: bool
                 ) -> tuple[float, float]:
    """(exact, f1) of one prediction, max over the gold answers."""
    if version_2:
        # v2.0 drops golds that normalize to nothing; none left = no answer
        gold_texts = [t for t in gold_texts if normalize_answer(t)] or [""]
    if not gold_texts:
        return 0.0, 0.0
    exact = max(float(normalize_answer(prediction) == normalize_answer(g))
                for g in gold_texts)
    f1 = max(_f1(prediction, g, version_2) for g in gold_texts)
    return exact, f1


def _f1(prediction: str, gold: str, version_2: bool) -> float:
    """Token-overlap F1 of normalized answers."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if version_2 and (not pred_tokens or not gold_tokens):
        # v2.0: an empty answer only matches an empty answer
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _averages(exact: dict, f1: dict, ids, prefix: str = "") -> dict:
    """Percent exact and f1 over ids; with a prefix also their count, named
    as the official v2.0 script names them (HasAns_exact, ...)."""
    ids = list(ids)

    def percent(scores: dict) -> float:
        return 100.0 * sum(scores[q] for q in ids) / len(ids) if ids else 0.0

    if not prefix:
        return {"exact_match": percent(exact), "f1": percent(f1)}
    return {f"{prefix}exact": percent(exact), f"{prefix}f1": percent(f1),
            f"{prefix}total": len(ids)}
