"""GLUE and SQuAD metrics against hand-computed values."""

import math
import warnings

import numpy as np
import pytest

from workflow.scripts.data.metrics import (_GLUE_METRICS, MetricsError, glue_metrics,
                                             normalize_answer, squad_metrics)


# -------------------------------------------------------------------- GLUE

def test_mrpc_accuracy_and_binary_f1():
    # tp=2 fp=1 fn=1 tn=0: precision = recall = 2/3, accuracy 2/4
    result = glue_metrics("mrpc", [1, 0, 1, 1], [1, 1, 0, 1])
    assert result == pytest.approx({"f1": 2 / 3, "accuracy": 0.5})
    assert all(type(v) is float for v in result.values())


def test_f1_uses_class_1_as_positive():
    # all zeros right, no positive predicted: f1 of class 1 is 0
    assert glue_metrics("qqp", [0, 0, 0], [0, 0, 1])["f1"] == 0.0


def test_cola_matthews_correlation():
    # tp=2 fp=1 tn=1 fn=0: (2*1 - 1*0) / sqrt(3*2*2*1)
    result = glue_metrics("cola", [1, 1, 1, 0], [1, 1, 0, 0])
    assert result == {"matthews_correlation": pytest.approx(2 / math.sqrt(12))}


def test_stsb_pearson_and_spearman():
    # deviations (-1,0,1) and (-1,1,0): cov 1, variances 2 -> r = 1/2
    assert glue_metrics("stsb", [1.0, 2.0, 3.0], [1.0, 3.0, 2.0]) == \
        pytest.approx({"pearson": 0.5, "spearmanr": 0.5})
    # monotonic but not linear: spearman 1, pearson 25 / sqrt(5 * 129)
    result = glue_metrics("stsb", [1, 2, 3, 4], [1, 4, 9, 16])
    assert result == pytest.approx({"pearson": 25 / math.sqrt(645),
                                    "spearmanr": 1.0})


@pytest.mark.parametrize("name", ["sst2", "mnli", "qnli", "rte", "wnli"])
def test_accuracy_tasks(name):
    assert glue_metrics(name, [0, 1, 2, 1], [0, 1, 1, 1]) == {
        "accuracy": 0.75}


@pytest.mark.parametrize("args", [
    ("mrpc", [1, 0], [1]),       # lengths differ
    ("mrpc", [], []),            # nothing to score
    ("squad", [1], [1]),         # QA has its own function
])
def test_glue_refuses_bad_input(args):
    with pytest.raises(MetricsError):
        glue_metrics(*args)


def test_glue_unknown_task_is_a_value_error():
    with pytest.raises(ValueError, match="unknown task"):
        glue_metrics("glue", [1], [1])


# ------------------------------------------------------------------- SQuAD

@pytest.mark.parametrize("text, normalized", [
    ("The  Eiffel-Tower!", "eiffeltower"),   # punctuation dropped, not split
    ("an apple a day", "apple day"),         # all three articles
    ("Theater at THE park.", "theater at park"),  # only whole words
    ("  A  ", ""),
    ("\u201cquoted\u201d", "\u201cquoted\u201d"),  # not ASCII punctuation
    ("1,000.5 m", "10005 m"),
])
def test_official_normalization(text, normalized):
    assert normalize_answer(text) == normalized


def _refs(*golds):
    return [{"id": f"q{i}", "answers": {"text": list(g),
                                        "answer_start": [0] * len(g)}}
            for i, g in enumerate(golds)]


def test_best_over_several_gold_answers():
    refs = _refs(["Denver Broncos", "Broncos"], ["Denver Broncos", "Broncos"])
    # q0 exact (after normalization); q1 tokens {broncos, team}:
    # vs "broncos" p=1/2 r=1 -> 2/3; vs "denver broncos" -> 1/2; max 2/3
    preds = {"q0": "the broncos.", "q1": "Broncos team"}
    result = squad_metrics(preds, refs)
    assert result == pytest.approx({"exact_match": 50.0,
                                    "f1": 100 * (1 + 2 / 3) / 2})


def test_f1_counts_repeated_tokens_once_each():
    # "x x y" vs "x y y": common tokens are one x and one y -> p = r = 2/3
    result = squad_metrics({"q0": "x x y"}, _refs(["x y y"]))
    assert result["f1"] == pytest.approx(100 * 2 / 3)
    assert result["exact_match"] == 0.0


def test_v1_has_no_breakdown_and_requires_every_prediction():
    assert set(squad_metrics({"q0": "a"}, _refs(["b"]))) == {
        "exact_match", "f1"}
    with pytest.raises(MetricsError, match="1 of 2 questions"):
        squad_metrics({"q0": "a"}, _refs(["a"], ["b"]))


def test_v2_no_answer_scoring_and_breakdown():
    refs = _refs(["Paris"], [], [], ["blue sky"])
    preds = {"q0": "Paris", "q1": "", "q2": "London", "q3": "sky"}
    result = squad_metrics(preds, refs)
    assert result == pytest.approx({
        "exact_match": 50.0, "f1": 100 * (1 + 1 + 0 + 2 / 3) / 4,
        "HasAns_exact": 50.0, "HasAns_f1": 100 * (1 + 2 / 3) / 2,
        "HasAns_total": 2,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2})


def test_v2_empty_answers_follow_the_v2_script():
    # gold "the" normalizes to nothing: v2 drops it, so "" matches fully,
    # while v1 gives exact 1 but f1 0 (no common tokens)
    refs = _refs(["the"])
    assert squad_metrics({"q0": ""}, refs, version_2=True)["f1"] == 100.0
    v1 = squad_metrics({"q0": ""}, refs)
    assert (v1["exact_match"], v1["f1"]) == (100.0, 0.0)


def test_no_answer_probability_above_threshold_means_no_answer():
    refs = _refs(["Paris"], [])
    preds = {"q0": "Paris", "q1": "London"}
    probabilities = {"q0": 0.2, "q1": 0.9}
    assert squad_metrics(preds, refs)["exact_match"] == 50.0
    result = squad_metrics(preds, refs, probabilities,
                           no_answer_threshold=0.5)
    assert result["exact_match"] == 100.0
    result = squad_metrics(preds, refs, probabilities,
                           no_answer_threshold=0.1)
    assert result["exact_match"] == 50.0  # q0 now answered "no answer"


# ------------------------------------- the numpy metrics against their definitions

def _random_cases(seed: int):
    """Predictions and references of every shape the tasks score, with the
    edge cases: one class only, nothing predicted, ties, constant sides."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    binary = rng.integers(0, 2, (2, n))
    classes = rng.integers(0, int(rng.integers(1, 5)), (2, n))
    multi = rng.integers(0, 2, (2, n, int(rng.integers(2, 5))))  # one column would be binary to sklearn
    floats = rng.integers(0, 6, (2, n)).astype(float) / 5  # STS-B's scale with many ties
    return binary, classes, multi, floats


@pytest.mark.parametrize("seed", range(60))
def test_classification_metrics_equal_scikit_learn(seed):
    from sklearn.metrics import f1_score, matthews_corrcoef

    binary, classes, multi, _ = _random_cases(seed)
    cases = [(binary, "f1", lambda p, r: f1_score(r, p, zero_division=0)),
             (binary, "matthews_correlation", lambda p, r: matthews_corrcoef(r, p)),
             (classes, "matthews_correlation", lambda p, r: matthews_corrcoef(r, p))]
    for data in (classes, multi):
        for average in ("macro", "micro"):
            cases.append((data, f"f1_{average}",
                          lambda p, r, a=average: f1_score(r, p, average=a, zero_division=0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for (p, r), name, reference in cases:
            assert _GLUE_METRICS[name](p, r) == pytest.approx(reference(p, r), abs=1e-12), name
    assert _GLUE_METRICS["f1"](np.zeros(3, int), np.zeros(3, int)) == 0.0


@pytest.mark.parametrize("seed", range(60))
def test_correlations_equal_scipy(seed):
    from scipy import stats

    *_, (p, r) = _random_cases(seed)
    for name, reference in (("pearson", stats.pearsonr), ("spearmanr", stats.spearmanr)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = reference(p, r)[0] if len(p) > 1 else float("nan")
        ours = _GLUE_METRICS[name](p, r)
        assert (math.isnan(ours) and math.isnan(expected)) or ours == pytest.approx(expected, abs=1e-12), name
    assert math.isnan(_GLUE_METRICS["pearson"](np.ones(4), np.arange(4.0)))
