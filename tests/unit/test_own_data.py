"""Own data files: columns by name or position, labels found as run_glue
finds them, and errors that name the file, the line and the column."""

from __future__ import annotations

import json

import pytest

from workflow.scripts.settings import config as cfg
from workflow.scripts.common import tasks
from workflow.scripts.settings.views import DataFiles
from workflow.scripts.data.errors import DataFormatError
from workflow.scripts.data.sources import load_local


def load(task: str, train: str, dev: str, tmp_path, fmt="csv", **settings):
    (tmp_path / f"train.{fmt}").write_text(train)
    (tmp_path / f"dev.{fmt}").write_text(dev)
    files = {"train": str(tmp_path / f"train.{fmt}"), "validation": str(tmp_path / f"dev.{fmt}")}
    data = DataFiles(format=fmt, **files, **{"text_columns": ["text"], **settings})
    return load_local(tasks.get_task(task), files, fmt, data)


def test_labels_are_found_sorted_numbers_in_numeric_order(tmp_path):
    data = load("classification", "text,label\na,10\nb,9\nc,2\n", "text,label\nd,9\n", tmp_path)
    assert data["train"].features["label"].names == ["2", "9", "10"]
    assert data["train"]["label"] == [2, 1, 0] and data["validation"]["label"] == [1]


def test_given_label_names_fix_the_order(tmp_path):
    data = load("classification", "text,label\na,pos\nb,neg\n", "text,label\nc,pos\n", tmp_path,
                label_names=["pos", "neg"])
    assert data["train"]["label"] == [0, 1]


def test_a_validation_label_the_training_file_lacks_names_file_line_and_column(tmp_path):
    with pytest.raises(DataFormatError) as err:
        load("classification", "text,label\na,1\nb,2\n", "text,label\nc,1\nd,3\n", tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'dev.csv'}: line 3, column 'label': label '3' is not among "
                                     "the training labels (1, 2)")


def test_a_missing_column_is_named(tmp_path):
    with pytest.raises(DataFormatError, match=r"train.csv: line 2: no column 'text' \(found 'body', 'label'\)"):
        load("classification", "body,label\na,1\n", "body,label\nb,1\n", tmp_path)


def test_an_empty_text_is_named(tmp_path):
    with pytest.raises(DataFormatError, match=r"train.csv: line 3, column 'text': empty text"):
        load("classification", "text,label\na,1\n,2\n", "text,label\nb,1\n", tmp_path)


def test_tsv_without_header_by_position_keeps_quotes(tmp_path):
    data = load("regression", '"quoted" start\tother\t1.5\nplain\tx\t0\n', "a\tb\t2\n", tmp_path, fmt="tsv",
                header=False, text_columns=[0, 1], label_column=2)
    assert data["train"]["text"] == ['"quoted" start', "plain"] and data["train"]["label"] == [1.5, 0.0]
    assert data["train"]["text_pair"] == ["other", "x"]


def test_multi_label_lists_and_comma_separated_cells(tmp_path):
    lines = [{"text": "a", "tags": ["x", "y"]}, {"text": "b", "tags": []}]
    data = load("multi_label", "".join(json.dumps(r) + "\n" for r in lines), json.dumps(lines[0]) + "\n",
                tmp_path, fmt="jsonl", label_column="tags")
    assert data["train"]["label"] == [[0, 1], []]
    data = load("multi_label", 'text,tags\na,"y,x"\n', "text,tags\nb,x\n", tmp_path, label_column="tags")
    assert data["train"]["label"] == [[1, 0]]


def hub_folder(tmp_path):
    """A dataset folder in the Hub's own parquet layout (data/<split>-*.parquet,
    ClassLabel names in the schema): load_dataset reads it as it reads an id."""
    import datasets

    schema = datasets.Features({"headline": datasets.Value("string"),
                                "topic": datasets.ClassLabel(names=["world", "sports", "business"])})
    splits = {"train": {"headline": ["a", "b", "c"], "topic": [2, 0, 1]},
              "test": {"headline": ["d"], "topic": [1]}}
    folder = tmp_path / "news" / "data"
    folder.mkdir(parents=True)
    for split, columns in splits.items():
        datasets.Dataset.from_dict(columns, schema).to_parquet(folder / f"{split}-00000-of-00001.parquet")
    return str(tmp_path / "news")


def test_a_hub_dataset_by_split_names_keeps_its_class_label_order(tmp_path):
    data = DataFiles(format="hub", dataset=hub_folder(tmp_path), train="train", validation="test",
                     text_columns=["headline"], label_column="topic")
    loaded = load_local(tasks.get_task("classification"), {}, "hub", data)
    assert loaded["train"].features["label"].names == ["world", "sports", "business"]  # not sorted
    assert loaded["train"]["label"] == [2, 0, 1] and loaded["validation"]["text"] == ["d"]


def test_a_hub_split_that_does_not_exist_says_what_to_set(tmp_path):
    from workflow.scripts.data.errors import DataError

    data = DataFiles(format="hub", dataset=hub_folder(tmp_path), train="train", validation="dev",
                     text_columns=["headline"], label_column="topic")
    with pytest.raises(DataError, match="set data.train and data.validation to its split names"):
        load_local(tasks.get_task("classification"), {}, "hub", data)


def test_an_unreachable_hub_says_how_to_go_offline(monkeypatch):
    import datasets
    import huggingface_hub

    from workflow.scripts.data.errors import HubUnavailableError

    # The network boundary: the Hub answers nothing, as on this machine.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    data = DataFiles(format="hub", dataset="cpuddp-tests/no-such-dataset", train="train", validation="test",
                     text_columns=["text"])
    with pytest.raises(HubUnavailableError, match="save it to parquet where there is network"):
        load_local(tasks.get_task("classification"), {}, "hub", data)


@pytest.mark.parametrize("data, message", [
    ({"format": "csv", "train": "t", "validation": "v"}, "task classification reads your own files"),
    ({"format": "hub", "train": "train", "validation": "test", "text_columns": ["a"]},
     "data.format hub and data.dataset go together"),
    ({"format": "csv", "train": "t", "validation": "v", "text_columns": ["a"], "dataset": "ag_news"},
     "data.format hub and data.dataset go together"),
    ({"format": "csv", "train": "t", "validation": "v", "text_columns": ["a"], "header": False},
     "with data.header: false, data.text_columns and data.label_column are 0-based column positions"),
])
def test_config_errors_say_what_to_set(data, message):
    with pytest.raises(cfg.ConfigError, match=message):
        cfg.validate({"experiment": "x", "task": "classification", "model": "m", "data": data})


def test_text_columns_are_refused_for_glue():
    with pytest.raises(cfg.ConfigError, match="data.text_columns is for own data"):
        cfg.validate({"experiment": "x", "task": "mrpc", "model": "m",
                      "data": {"format": "csv", "train": "t", "validation": "v", "text_columns": ["a"]}})


def test_metrics_by_problem_type():
    from workflow.scripts.data.metrics import glue_metrics
    four = tasks.with_labels(tasks.get_task("classification"), "abcd")
    assert set(glue_metrics(four, [0, 1, 2, 3], [0, 1, 2, 2])) == {"accuracy", "f1_macro"}
    two = tasks.with_labels(tasks.get_task("classification"), "ab")
    assert set(glue_metrics(two, [0, 1], [0, 1])) == {"accuracy", "f1_macro", "f1"}
    multi = tasks.with_labels(tasks.get_task("multi_label"), "abc")
    result = glue_metrics(multi, [[1, 0, 1], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]])
    assert result["subset_accuracy"] == 0.5 and result["f1_micro"] == pytest.approx(0.8)
    assert glue_metrics("regression", [1.0, 2.0, 4.0], [1.0, 2.0, 3.0])["mse"] == pytest.approx(1 / 3)


def test_a_hub_dataset_config_has_no_local_files_to_check():
    config = cfg.validate({"experiment": "x", "task": "classification", "model": "m",
                           "data": {"format": "hub", "dataset": "fancyzhx/ag_news", "train": "train",
                                    "validation": "test", "text_columns": ["text"]}})
    assert cfg.data_files(config) == {}
    cfg.check_data_files(config)  # split names are not paths
