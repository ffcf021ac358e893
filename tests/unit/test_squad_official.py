"""cpuddp's SQuAD metrics give the official evaluation script's EM / F1.

The official v2.0 scoring functions come from allennlp-models' copy of the
script (downloaded by `make venv` into .venv/reference, see
tests/reference/requirements.txt); the averaging into exact / f1 and the
HasAns / NoAns split is the official script's main(), written out below.
"""

from __future__ import annotations

import json
import random
import sys
import types
import zipfile
from pathlib import Path

import pytest

from workflow.scripts.data import demo
from workflow.scripts.data import metrics

WHEEL = "allennlp_models-2.10.1-py3-none-any.whl"


@pytest.fixture(scope="module")
def official():
    wheel = Path(sys.prefix) / "reference" / WHEEL
    assert wheel.is_file(), f"{wheel} missing: run `make venv` (it downloads the reference scorer)"
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read("allennlp_models/rc/tools/squad.py").decode()
    module = types.ModuleType("official_squad_v2")
    exec(compile(source, "allennlp_models/rc/tools/squad.py", "exec"), module.__dict__)
    return module


def official_scores(official, dataset, predictions, na_probs=None, threshold=1.0):
    """The official v2.0 script's main(): raw scores, no-answer threshold, averages."""
    exact, f1 = {}, {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                golds = [a["text"] for a in qa["answers"] if official.normalize_answer(a["text"])] or [""]
                exact[qa["id"]], f1[qa["id"]] = official.get_metric_score(predictions[qa["id"]], golds)
    has_ans = official.make_qid_to_has_ans(dataset)
    if na_probs:
        for qid in exact:
            if na_probs[qid] > threshold:
                exact[qid] = f1[qid] = float(not has_ans[qid])

    def average(ids, prefix=""):
        return {f"{prefix}exact": 100.0 * sum(exact[q] for q in ids) / len(ids),
                f"{prefix}f1": 100.0 * sum(f1[q] for q in ids) / len(ids)}
    result = average(list(exact))
    for prefix, answerable in (("HasAns_", True), ("NoAns_", False)):
        ids = [q for q, has in has_ans.items() if has == answerable]
        if ids:
            result.update(average(ids, prefix), **{f"{prefix}total": len(ids)})
    return result


def noisy_prediction(answers: list[str], context: str, rng: random.Random) -> str:
    """Exact, re-cased, re-punctuated, partial, wider, wrong or empty answers."""
    words = context.split()
    start = rng.randrange(len(words))
    gold = rng.choice(answers) if answers else ""
    return rng.choice([
        gold, gold.upper(), f"the {gold}.", f" {gold} , ", " ".join(gold.split()[:-1]),
        " ".join(words[start:start + rng.randint(1, 6)]), "", "an", gold.replace(" ", "  "),
    ])


def references_and_predictions(tmp_path, version_2: bool, seed: int):
    _, dev = demo.write_squad_demo(tmp_path, n_train=1, n_dev=300, seed=seed, version_2=version_2)
    dataset = json.loads(dev.read_text())["data"]
    rng = random.Random(seed)
    references, predictions = [], {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                texts = [a["text"] for a in qa["answers"]]
                references.append({"id": qa["id"], "answers": {"text": texts}})
                predictions[qa["id"]] = noisy_prediction(texts, paragraph["context"], rng)
    return dataset, references, predictions


def ours_as_official(result: dict) -> dict:
    return {key.replace("exact_match", "exact"): value for key, value in result.items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_v2_equals_the_official_script(official, tmp_path, seed):
    dataset, references, predictions = references_and_predictions(tmp_path, True, seed)
    assert any(not r["answers"]["text"] for r in references) and any(r["answers"]["text"] for r in references)
    expected = official_scores(official, dataset, predictions)
    assert ours_as_official(metrics.squad_metrics(predictions, references, version_2=True)) == \
        pytest.approx(expected, abs=1e-9)


def test_v2_no_answer_threshold_equals_the_official_script(official, tmp_path):
    dataset, references, predictions = references_and_predictions(tmp_path, True, 3)
    rng = random.Random(3)
    na_probs = {qid: rng.random() for qid in predictions}
    expected = official_scores(official, dataset, predictions, na_probs, threshold=0.5)
    ours = metrics.squad_metrics(predictions, references, no_answer_probability=na_probs,
                                 no_answer_threshold=0.5, version_2=True)
    assert ours_as_official(ours) == pytest.approx(expected, abs=1e-9)


def test_v1_equals_the_official_scoring_on_answerable_questions(official, tmp_path):
    """v1.1 and v2.0 score a question alike unless a side normalizes to
    nothing; v1.1 then gives F1 0 where v2.0 gives 1 for an empty match."""
    dataset, references, predictions = references_and_predictions(tmp_path, False, 4)
    predictions = {q: p if metrics.normalize_answer(p) else "wrong" for q, p in predictions.items()}
    expected = official_scores(official, dataset, predictions)
    ours = metrics.squad_metrics(predictions, references, version_2=False)
    assert set(ours) == {"exact_match", "f1"}
    assert ours_as_official(ours) == pytest.approx({k: expected[k] for k in ("exact", "f1")}, abs=1e-9)
    assert 0 < ours["exact_match"] < ours["f1"] < 100
