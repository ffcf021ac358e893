"""Local data that cannot be loaded, named in one line; and the Hub path
(its download boundary, no network).
"""

import json

import datasets
import pytest

from helpers.messages import one_line

from helpers.data_files import save, write

from workflow.scripts.data import sources as ll
from workflow.scripts.common.tasks import get_task


def tsv(*rows):
    return "".join("\t".join(map(str, row)) + "\n" for row in rows)


# ------------------------------------------------------------------- errors

def test_wrong_columns_name_file_found_and_expected(tmp_path):
    path = save(tmp_path, "csv", [{"text": "a", "label": 0}])
    with pytest.raises(ll.DataFormatError) as err:
        ll.load_local(get_task("mrpc"), {"train": path}, "csv")
    message = one_line(err)
    assert path in message
    assert "found columns ['text', 'label']" in message
    assert "expected columns ['sentence1', 'sentence2', 'label']" in message


def test_wrong_archive_file_names_its_header(tmp_path):
    sst2 = write(tmp_path / "train.tsv", tsv(("sentence", "label"), ("a", 1)))
    with pytest.raises(ll.DataFormatError, match="'#1 String'"):
        ll.load_local(get_task("mrpc"), {"train": sst2}, "glue_tsv")


def test_missing_file_is_named(tmp_path):
    path = str(tmp_path / "nope.tsv")
    with pytest.raises(ll.MissingDataFileError) as err:
        ll.load_local(get_task("sst2"), {"train": path}, "glue_tsv")
    assert path in one_line(err) and "train" in str(err.value)


@pytest.mark.parametrize("label", [2, "maybe", -1])
def test_label_out_of_range_names_file_and_value(tmp_path, label):
    path = save(tmp_path, "jsonl", [{"sentence": "a", "label": label}])
    with pytest.raises(ll.DataFormatError) as err:
        ll.load_local(get_task("sst2"), {"train": path}, "jsonl")
    message = one_line(err)
    assert path in message and repr(label) in message


def test_non_numeric_regression_label(tmp_path):
    rows = [{"sentence1": "a", "sentence2": "b", "label": "high"}]
    path = save(tmp_path, "jsonl", rows)
    with pytest.raises(ll.DataFormatError, match="'high' is not a number"):
        ll.load_local(get_task("stsb"), {"train": path}, "jsonl")


@pytest.mark.parametrize("fmt, text", [
    ("csv", ""), ("csv", "sentence,label\n"), ("jsonl", "\n"),
    ("glue_tsv", "sentence\tlabel\n")])
def test_empty_files(tmp_path, fmt, text):
    path = write(tmp_path / "empty", text)
    with pytest.raises(ll.DataFormatError, match="no data rows"):
        ll.load_local(get_task("sst2"), {"train": path}, fmt)


@pytest.mark.parametrize("name, files, fmt, match", [
    ("sst2", {"train": "x"}, "xlsx", "unknown data format 'xlsx'"),
    ("sst2", {"train": "x"}, "squad_json", "squad_json is for squad"),
    ("squad", {"train": "x"}, "glue_tsv", "glue_tsv is for GLUE"),
    ("sst2", {"test": "x"}, "csv", "unknown data split 'test'"),
    ("sst2", {"validation_mismatched": "x"}, "csv", "unknown data split"),
    ("sst2", {}, "csv", "no data files"),
])
def test_bad_settings(name, files, fmt, match):
    with pytest.raises(ll.DataError, match=match):
        ll.load_local(get_task(name), files, fmt)


def test_broken_json_files(tmp_path):
    bad = write(tmp_path / "bad.jsonl", '{"sentence": "a", "label": 0}\n{\n')
    with pytest.raises(ll.DataFormatError, match="line 2 is not valid JSON"):
        ll.load_local(get_task("sst2"), {"train": bad}, "jsonl")
    squad = write(tmp_path / "squad.json", json.dumps({"version": "1.1"}))
    with pytest.raises(ll.DataFormatError, match="not an official SQuAD"):
        ll.load_local(get_task("squad"), {"train": squad}, "squad_json")


def test_errors_are_value_errors():
    for error in (ll.DataFormatError, ll.MissingDataFileError,
                  ll.HubUnavailableError):
        assert issubclass(error, ValueError)


# --------------------------------------------------------------------- Hub

@pytest.mark.parametrize("error", [
    ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub"),
    OSError("offline"), TimeoutError("slow")])
def test_hub_failures_become_one_clear_line(monkeypatch, error):
    def unreachable(*args, **kwargs):
        raise error

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(ll.HubUnavailableError) as err:
        ll.load_hub(get_task("mrpc"))
    assert one_line(err) == (
        "cannot download nyu-mll/glue/mrpc from the Hugging Face Hub (no"
        " network?): set data.train, data.validation, data.format (format one of"
        " glue_tsv csv tsv jsonl parquet squad_json) for local files (see"
        " docs/tasks.md, Data), or run `make demo` for the offline demo")
    assert err.value.__cause__ is error


def test_hub_message_without_config(monkeypatch):
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda *a, **k: (_ for _ in ()).throw(OSError()))
    with pytest.raises(ll.HubUnavailableError, match=r"download "
                       r"rajpurkar/squad_v2 from"):
        ll.load_hub(get_task("squad_v2"))


def test_hub_keeps_train_and_validation_columns(monkeypatch):
    calls = []

    def fake(path, config):
        calls.append((path, config))
        split = datasets.Dataset.from_dict(
            {"sentence": ["a"], "label": [1], "idx": [0]},
            datasets.Features({"sentence": datasets.Value("string"),
                               "label": ll.features(get_task("sst2"))["label"],
                               "idx": datasets.Value("int32")}))
        return datasets.DatasetDict(train=split, validation=split, test=split)

    monkeypatch.setattr(datasets, "load_dataset", fake)
    ds = ll.load_hub(get_task("sst2"))
    assert calls == [("nyu-mll/glue", "sst2")]
    assert list(ds) == ["train", "validation"]
    assert ds["train"].features == ll.features(get_task("sst2"))
