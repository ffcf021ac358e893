"""Extractive QA (SQuAD) post-processing, torch-free.

Follows transformers' examples (run_qa.py, utils_qa.py): contexts longer
than max_length are split into overlapping windows ("features") of one
example (data.qa_features); the model scores each token as answer start and
end; the best valid span over all windows, mapped back to characters of the
context, is the answer. Features are NOT padded (padding=False): batches
are padded later, so each feature has its own length.
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple
from collections.abc import Sequence

import numpy as np


class QAError(ValueError):
    """Features, examples and logits do not belong together."""


class Span(NamedTuple):
    """One candidate answer: its score and where it lies in the context."""

    score: float
    """start_logit + end_logit."""
    start_logit: float
    end_logit: float
    start_char: int
    end_char: int
    """Character offsets: the answer is context[start_char:end_char]."""


# ---------------------------------------------------------- post-processing

def postprocess_predictions(
        examples, features, start_logits: Sequence, end_logits: Sequence,
        version_2: bool = False, n_best_size: int = 20,
        max_answer_length: int = 30, null_score_diff_threshold: float = 0.0,
) -> tuple[dict[str, str], dict[str, float]]:
    """Answer text per example id, and its null odds.

    examples: columns ``id`` and ``context`` (a Dataset or a dict of lists);
    features: columns ``example_id`` and ``offset_mapping`` from
    data.qa_features.prepare_eval_features. start_logits/end_logits: a list with one 1-D
    array per feature, at least as long as its offset_mapping (features are
    unpadded; a padded 2-D array also works, as rows are cut to each
    feature's length).

    null odds = best "no answer" (CLS) score over the windows minus the best
    span's score. With version_2 an example whose null odds exceed
    null_score_diff_threshold is answered "". An example without any valid
    span is answered "".
    """
    offsets_all = list(features["offset_mapping"])
    _check_logits(offsets_all, start_logits, end_logits)
    windows = defaultdict(list)
    for i, example_id in enumerate(features["example_id"]):
        windows[example_id].append(i)
    predictions, null_odds = {}, {}
    for example_id, context in zip(examples["id"], examples["context"]):
        if not windows[example_id]:
            raise QAError(f"example {example_id!r} has no features: pass the"
                          " features made from these same examples")
        best, null_score = _best_span(
            [(start_logits[i], end_logits[i], offsets_all[i])
             for i in windows[example_id]], n_best_size, max_answer_length)
        odds = null_score - (best.score if best else 0.0)
        null_odds[example_id] = odds
        answerable = best is not None and not (
            version_2 and odds > null_score_diff_threshold)
        predictions[example_id] = (context[best.start_char:best.end_char]
                                   if answerable else "")
    return predictions, null_odds


def _best_span(windows: list, n_best_size: int, max_answer_length: int
               ) -> tuple[Span | None, float]:
    """The best span over one example's windows ((start_logits, end_logits,
    offsets) each), and the lowest "no answer" score start[0] + end[0]."""
    null_score, spans = float("inf"), []
    for start_logits, end_logits, offsets in windows:
        start = np.asarray(start_logits, dtype=np.float64)
        end = np.asarray(end_logits, dtype=np.float64)
        null_score = min(null_score, float(start[0] + end[0]))
        spans += n_best_spans(start, end, offsets, n_best_size,
                              max_answer_length)
    return max(spans, default=None), null_score


def n_best_spans(start_logits: np.ndarray, end_logits: np.ndarray,
                 offsets: list, n_best_size: int = 20,
                 max_answer_length: int = 30) -> list[Span]:
    """Valid spans of one feature, best first: start and end among the
    n_best_size highest logits, both in the context (offset not None),
    end >= start, at most max_answer_length tokens."""
    length = len(offsets)
    start_logits, end_logits = start_logits[:length], end_logits[:length]
    top_starts = np.argsort(start_logits)[::-1][:n_best_size]
    top_ends = np.argsort(end_logits)[::-1][:n_best_size]
    spans = [
        Span(float(start_logits[s] + end_logits[e]), float(start_logits[s]),
             float(end_logits[e]), offsets[s][0], offsets[e][1])
        for s in top_starts for e in top_ends
        if offsets[s] is not None and offsets[e] is not None
        and s <= e < s + max_answer_length]
    return sorted(spans, reverse=True)


def _check_logits(offsets_all: list, start_logits, end_logits) -> None:
    """One row of logits per feature, each covering the feature's tokens."""
    if not len(start_logits) == len(end_logits) == len(offsets_all):
        raise QAError(
            f"{len(start_logits)} start and {len(end_logits)} end logit rows"
            f" for {len(offsets_all)} features: pass one row per feature")
    for i, offsets in enumerate(offsets_all):
        shortest = min(len(start_logits[i]), len(end_logits[i]))
        if shortest < len(offsets):
            raise QAError(f"feature {i} has {len(offsets)} tokens but only"
                          f" {shortest} logits: pass one logit per token")
