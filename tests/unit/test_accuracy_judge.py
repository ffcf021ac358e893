"""bench.accuracy_judge and bench.accuracy_data: scores, the verdict over
seeds, the loss curves and the STS-B-shaped pairs (no training)."""

from __future__ import annotations

import random

import pytest

from bench import accuracy_judge as judge
from bench.accuracy_data import stsb_pair, stsb_raw


def test_scores_mrpc_f1_of_the_positive_class_and_accuracy():
    got = judge.scores("mrpc", [1, 1, 0, 0], [1, 0, 1, 0])
    assert got == {"f1": pytest.approx(0.5), "accuracy": pytest.approx(0.5)}


def test_scores_stsb_pearson_and_spearman():
    got = judge.scores("stsb", [0.1, 0.2, 0.9, 0.5], [0.0, 1.0, 5.0, 3.0])
    assert got["spearman"] == pytest.approx(1.0)
    assert 0.9 < got["pearson"] < 1.0


def _run(row, seed, f1, losses, steps=(5, 10, 15)):
    return {"task": "mrpc", "row": row, "seed": seed, "scores": {"f1": f1, "accuracy": f1},
            "loss_history": [[s, loss] for s, loss in zip(steps, losses)]}


def test_verdict_within_one_std_of_exact_and_loss_gap():
    runs = [_run("exact", 1, 0.80, [0.7, 0.6, 0.5]), _run("exact", 2, 0.84, [0.7, 0.5, 0.4]),
            _run("near", 1, 0.83, [0.7, 0.6, 0.5]), _run("near", 2, 0.83, [0.7, 0.5, 0.4]),
            _run("far", 1, 0.60, [0.7, 0.6, 0.6], steps=(5, 10, 16)), _run("far", 2, 0.62, [0.7, 0.6, 0.6])]
    summary = judge.summarize(runs)
    assert summary["mrpc"]["exact"]["f1"]["mean"] == pytest.approx(0.82)
    judged = judge.verdicts(runs, summary, "exact", ["near", "far", "missing"])["mrpc"]
    assert judged["near"]["within_one_std"] is True and judged["near"]["loss_gap"] == pytest.approx(0.0)
    assert judged["far"]["within_one_std"] is False
    assert judged["far"]["loss_gap"] == pytest.approx(0.025)  # steps 5 (gap 0) and 10 (0.05), in every run
    assert "missing" not in judged


def test_one_seed_has_no_std_and_no_verdict(tmp_path):
    runs = [_run("exact", 1, 0.8, [0.7, 0.6, 0.5]), _run("cand", 1, 0.8, [0.7, 0.6, 0.5])]
    judged = judge.verdicts(runs, judge.summarize(runs), "exact", ["cand"])
    assert judged["mrpc"]["cand"]["within_one_std"] is None
    judge.plot(runs, ["exact", "cand"], tmp_path / "curves.png", "test")
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_stsb_pairs_are_deterministic_distinct_and_scored_0_to_5():
    data = stsb_raw(60, 20, seed=3)
    assert data["train"]["label"] == stsb_raw(60, 20, seed=3)["train"]["label"]
    sentences = [s for split in data.values() for key in ("sentence1", "sentence2") for s in split[key]]
    assert len(set(sentences)) == len(sentences)
    assert all(0.0 <= s <= 5.0 for s in data["train"]["label"])


def test_stsb_scores_spread_over_the_range():
    rng = random.Random(0)
    scores = [stsb_pair(rng)[2] for _ in range(400)]
    assert min(scores) < 0.5 and max(scores) > 4.5
    assert 0.25 < sum(s > 4.5 for s in scores) / len(scores) < 0.45
