"""Ranks and scoring read saved splits from the Arrow files without
datasets (data/arrow_split.py): the same rows, columns, lengths and label
names as datasets.load_from_disk gives, over one file or several, SQuAD's
nested answers and offsets too (tests/integration/test_light_steps.py: a
rank and the evaluate step do not import datasets)."""

from __future__ import annotations

import datasets
import pytest

from workflow.scripts.data.arrow_split import ArrowSplit, load_splits
from workflow.scripts.common import tasks

ROWS = {
    "input_ids": [[101, 7, 8, 102], [101, 9, 102], [101, 5, 6, 7, 8, 102], [101, 102]],
    "token_type_ids": [[0, 0, 1, 1], [0, 0, 1], [0, 0, 0, 1, 1, 1], [0, 0]],
}


def saved(tmp_path, labels, feature, shards=1):
    features = datasets.Features({"input_ids": datasets.List(datasets.Value("int32")),
                                  "token_type_ids": datasets.List(datasets.Value("int8")), "labels": feature})
    split = datasets.Dataset.from_dict({**ROWS, "labels": labels}, features=features)
    datasets.DatasetDict({"train": split, "validation": split}).save_to_disk(str(tmp_path / "tok"), num_shards={
        "train": shards, "validation": 1})
    return tmp_path / "tok"


@pytest.mark.parametrize("labels, feature, shards", [
    ([0, 1, 1, 0], datasets.ClassLabel(names=["no", "yes"]), 1),
    ([0.5, 1.25, 3.0, 4.75], datasets.Value("float32"), 2),
    ([[0], [1, 2], [], [2]], datasets.List(datasets.ClassLabel(names=["a", "b", "c"])), 3),
])
def test_the_same_split_as_datasets_gives(tmp_path, labels, feature, shards):
    folder = saved(tmp_path, labels, feature, shards)
    ours, theirs = ArrowSplit.load(folder), datasets.load_from_disk(str(folder))["train"].with_format(None)
    assert len(ours) == len(theirs) == 4
    assert ours.column_names == theirs.column_names
    assert [ours[i] for i in range(4)] == [theirs[i] for i in range(4)]
    assert ours.__getitems__([3, 0, 2]) == [theirs[i] for i in (3, 0, 2)]
    assert list(ours) == list(theirs) and list(ours.select([2, 0])) == [theirs[2], theirs[0]]
    assert ours["input_ids"] == theirs["input_ids"]
    assert ours.lengths() == [len(ids) for ids in theirs["input_ids"]] == [4, 3, 6, 2]
    assert tasks.labels_in(ours.features) == tasks.labels_in(theirs.features)
    picked = ours.select_columns(["input_ids", "labels"])
    assert picked.column_names == ["input_ids", "labels"] and picked[1] == {"input_ids": ROWS["input_ids"][1],
                                                                           "labels": labels[1]}
    assert tasks.labels_in(picked.features) == tasks.labels_in(theirs.features)


def test_a_missing_split_names_its_step(tmp_path):
    folder = saved(tmp_path, [0, 1, 1, 0], datasets.ClassLabel(names=["no", "yes"]))
    with pytest.raises(FileNotFoundError, match="no split 'test' saved in .*: run the step that writes it again"):
        ArrowSplit.load(folder, "test")


def test_squad_rows_keep_their_nesting(tmp_path):
    """Raw examples (answers: a struct of lists) and eval features (offsets with None) as datasets gives them."""
    raw = datasets.Dataset.from_dict({
        "id": ["a", "b"], "context": ["x y", "z"],
        "answers": [{"text": ["y"], "answer_start": [2]}, {"text": [], "answer_start": []}]})
    features = datasets.Dataset.from_dict({"example_id": ["a", "b"], "input_ids": [[101, 7, 102], [101, 102]],
                                           "offset_mapping": [[None, [0, 1], None], [None, None]]})
    datasets.DatasetDict({"validation": raw}).save_to_disk(str(tmp_path / "raw"))
    datasets.DatasetDict({"train": features, "validation": features}).save_to_disk(str(tmp_path / "tok"))
    ours, theirs = load_splits(tmp_path / "raw"), datasets.load_from_disk(str(tmp_path / "raw"))
    assert list(ours) == ["validation"] and list(ours["validation"]) == list(theirs["validation"])
    ours, theirs = load_splits(tmp_path / "tok"), datasets.load_from_disk(str(tmp_path / "tok"))
    assert list(ours) == ["train", "validation"]
    assert ours["validation"]["offset_mapping"] == theirs["validation"]["offset_mapping"]
    with pytest.raises(FileNotFoundError, match="no saved splits in"):
        load_splits(tmp_path / "none")
