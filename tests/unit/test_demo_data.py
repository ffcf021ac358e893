"""Tests for workflow.scripts.data.demo (demo MRPC / SQuAD generators)."""

import json
from pathlib import Path

import pytest

from helpers.demo_files import questions, read_tsv

from workflow.scripts.data import demo

REPO = Path(__file__).resolve().parents[2]
HEADER = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]






@pytest.fixture(scope="module")
def mrpc(tmp_path_factory):
    return demo.write_mrpc_demo(tmp_path_factory.mktemp("mrpc"), n_train=600, n_dev=200, seed=3)


@pytest.fixture(scope="module", params=[False, True], ids=["v1", "v2"])
def squad(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("squad")
    return demo.write_squad_demo(out, n_train=300, n_dev=90, seed=1, version_2=request.param)


def test_mrpc_deterministic(tmp_path):
    a = demo.write_mrpc_demo(tmp_path / "a", 200, 50, seed=7)
    b = demo.write_mrpc_demo(tmp_path / "b", 200, 50, seed=7)
    c = demo.write_mrpc_demo(tmp_path / "c", 200, 50, seed=8)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert a[0].read_bytes() != c[0].read_bytes()


def test_mrpc_format_and_balance(mrpc):
    train, dev = mrpc
    assert [train.name, dev.name] == ["train.tsv", "dev.tsv"]
    for path, n in ((train, 600), (dev, 200)):
        rows = read_tsv(path)
        assert rows[0] == HEADER
        assert len(rows) == n + 1
        assert all(len(r) == 5 and r[0] in "01" and r[1].isdigit() and r[2].isdigit() for r in rows[1:])
        assert all(r[3] and r[4] and r[3] != r[4] for r in rows[1:])
        positive = sum(r[0] == "1" for r in rows[1:]) / n
        assert 0.62 <= positive <= 0.72
    assert "\r" not in train.read_text(encoding="utf-8")


def test_mrpc_train_dev_disjoint(mrpc):
    train, dev = (read_tsv(p)[1:] for p in mrpc)
    train_sentences = {s for r in train for s in r[3:]}
    assert not train_sentences & {s for r in dev for s in r[3:]}
    ids = [r[i] for r in train + dev for i in (1, 2)]
    assert len(ids) == len(set(ids))


def test_mrpc_negatives_mostly_near_misses(mrpc):
    rows = read_tsv(mrpc[0])[1:]
    negatives = [r for r in rows if r[0] == "0"]
    shared = [len(set(r[3].split()) & set(r[4].split())) >= 3 for r in negatives]
    assert sum(shared) / len(negatives) > 0.6  # reworded sentences with a changed fact


def test_squad_deterministic(tmp_path):
    a = demo.write_squad_demo(tmp_path / "a", 100, 30, seed=2, version_2=True)
    b = demo.write_squad_demo(tmp_path / "b", 100, 30, seed=2, version_2=True)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def test_squad_format_and_offsets(squad):
    v2 = squad[0].name.endswith("v2.0.json")
    assert [p.name for p in squad] == (["train-v2.0.json", "dev-v2.0.json"] if v2
                                       else ["train-v1.1.json", "dev-v1.1.json"])
    for path, n in zip(squad, (300, 90)):
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["version"] == ("v2.0" if v2 else "1.1")
        assert all(set(a) == {"title", "paragraphs"} for a in doc["data"])
        qas = list(questions(path))
        assert len(qas) == n
        assert len({qa["id"] for _, qa in qas}) == n
        for context, qa in qas:
            assert qa["question"].endswith("?")
            assert len(qa["answers"]) <= 3 and (qa["answers"] or qa.get("is_impossible"))
            for ans in qa["answers"] + qa.get("plausible_answers", []):
                start = ans["answer_start"]
                assert context[start:start + len(ans["text"])] == ans["text"]
            if path.name.startswith("train"):
                assert len(qa["answers"]) <= 1


def test_squad_impossible_fraction(squad):
    """v2: about a third unanswerable, with no answers; v1.1: none."""
    version_2 = squad[0].name.endswith("v2.0.json")
    for path in squad:
        qas = [qa for _, qa in questions(path)]
        impossible = [qa for qa in qas if qa.get("is_impossible")]
        assert all(qa["answers"] == [] for qa in impossible)
        if version_2:
            assert 0.28 <= len(impossible) / len(qas) <= 0.38
        else:
            assert not impossible and all(qa["answers"] for qa in qas)


def test_squad_dev_has_alternative_answers(squad):
    qas = [qa for _, qa in questions(squad[1]) if qa["answers"]]
    assert any(len(qa["answers"]) > 1 for qa in qas)


def test_squad_train_dev_disjoint(squad):
    titles = [{a["title"] for a in json.loads(p.read_text())["data"]} for p in squad]
    assert not titles[0] & titles[1]


