"""Local data files in every format, their errors, and the Hub boundary."""

import json

import datasets
import pytest

from workflow.scripts.data import sources as ll
from workflow.scripts.common.tasks import get_task


def write(path, text, encoding="utf-8"):
    path.write_text(text, encoding=encoding)
    return str(path)


def tsv(*rows):
    return "".join("\t".join(map(str, row)) + "\n" for row in rows)


# ---------------------------------------------------------------- glue_tsv

def test_cola_archive_has_no_header(tmp_path):
    train = write(tmp_path / "train.tsv", tsv(
        ("gj04", 1, "", "Our friends won't buy this analysis."),
        ("gj04", 0, "*", 'He said "hi.')))  # unbalanced quote stays as is
    ds = ll.load_local(get_task("cola"), {"train": train}, "glue_tsv")
    assert list(ds) == ["train"]
    assert ds["train"].to_dict() == {
        "sentence": ["Our friends won't buy this analysis.", 'He said "hi.'],
        "label": [1, 0]}
    assert ds["train"].features["label"].names == ["unacceptable",
                                                   "acceptable"]


def test_mrpc_archive_with_byte_order_mark(tmp_path):
    text = tsv(("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
               (1, 702876, 702977, 'He "said', "She said"),
               (0, 2108705, 2108831, "A b.", "C d."))
    dev = write(tmp_path / "dev.tsv", text, encoding="utf-8-sig")
    ds = ll.load_local(get_task("mrpc"), {"validation": dev}, "glue_tsv")
    assert ds["validation"].to_dict() == {
        "sentence1": ['He "said', "A b."], "sentence2": ["She said", "C d."],
        "label": [1, 0]}


def test_mnli_word_labels_and_both_validation_splits(tmp_path):
    header = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse",
              "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
              "sentence1", "sentence2", "label1", "gold_label")

    def mnli(name, label):
        row = (0, 1, "1e", "gov", "(", "(", "(", "(", "P.", "H.", label, label)
        return write(tmp_path / name, tsv(header, row))

    files = {"train": mnli("train.tsv", "neutral"),
             "validation": mnli("dev_matched.tsv", "contradiction"),
             "validation_mismatched": mnli("dev_mm.tsv", "entailment")}
    ds = ll.load_local(get_task("mnli"), files, "glue_tsv")
    assert list(ds) == ["train", "validation_matched",
                        "validation_mismatched"]
    assert ds["train"].column_names == ["premise", "hypothesis", "label"]
    labels = [ds[s]["label"][0] for s in ds]
    assert labels == [1, 2, 0]


def test_stsb_scores_are_floats(tmp_path):
    header = ("index", "genre", "filename", "year", "old_index", "source1",
              "source2", "sentence1", "sentence2", "score")
    row = (0, "main", "f", "2012", 1, "none", "none", "A man.", "A guy.",
           "4.750")
    train = write(tmp_path / "train.tsv", tsv(header, row))
    ds = ll.load_local(get_task("stsb"), {"train": train}, "glue_tsv")
    assert ds["train"]["label"] == [4.75]
    assert ds["train"].features["label"].dtype == "float32"


def test_corrupted_archive_lines_are_skipped(tmp_path, caplog):
    text = tsv(("id", "qid1", "qid2", "question1", "question2",
                "is_duplicate"),
               (1, 2, 3, "How?", "Why?", 0),
               (4, 5, 6, "Cut short"),           # missing fields
               (7, 8, 9, "Who?", "Whom?", 1))
    train = write(tmp_path / "train.tsv", text)
    ds = ll.load_local(get_task("qqp"), {"train": train}, "glue_tsv")
    assert ds["train"]["label"] == [0, 1]
    assert "skipped 1 corrupted line" in caplog.text


@pytest.mark.parametrize("name", ["qnli", "rte"])
def test_word_labels_in_archive(tmp_path, name):
    first, second = get_task(name).text_columns
    text = tsv(("index", first, second, "label"),
               (0, "a", "b", "not_entailment"), (1, "c", "d", "entailment"))
    dev = write(tmp_path / "dev.tsv", text)
    ds = ll.load_local(get_task(name), {"validation": dev}, "glue_tsv")
    assert ds["validation"]["label"] == [1, 0]


# ------------------------------------------------------- csv/jsonl/parquet

def glue_rows():
    return [{"sentence1": "A, b.", "sentence2": 'C "d', "label": 1},
            {"sentence1": "E", "sentence2": "F", "label": "not_entailment"}]


def save(tmp_path, fmt, rows):
    path = tmp_path / f"data.{fmt}"
    if fmt == "jsonl":
        write(path, "".join(json.dumps(r) + "\n" for r in rows))
    else:  # datasets writes csv with a header and standard quoting
        table = {k: [str(r[k]) if k == "label" else r[k] for r in rows]
                 for k in rows[0]}
        getattr(datasets.Dataset.from_dict(table), f"to_{fmt}")(str(path))
    return str(path)


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_hf_column_files(tmp_path, fmt):
    path = save(tmp_path, fmt, glue_rows())
    ds = ll.load_local(get_task("rte"), {"train": path, "validation": path},
                       fmt)
    assert list(ds) == ["train", "validation"]
    assert ds["train"].to_dict() == {"sentence1": ["A, b.", "E"],
                                     "sentence2": ['C "d', "F"],
                                     "label": [1, 1]}
    assert ds["train"].features == ll.features(get_task("rte"))


def test_none_paths_are_skipped(tmp_path):
    path = save(tmp_path, "jsonl", glue_rows())
    ds = ll.load_local(get_task("rte"), {"train": None, "validation": path},
                       "jsonl")
    assert list(ds) == ["validation"]


# -------------------------------------------------------------------- SQuAD

SQUAD_V2 = {"version": "v2.0", "data": [{"title": "Paris", "paragraphs": [{
    "context": " Paris is the capital of France.",
    "qas": [
        {"id": "a1", "question": "Capital?", "is_impossible": False,
         "answers": [{"text": "Paris", "answer_start": 1},
                     {"text": "Paris", "answer_start": 1}]},
        {"id": "a2", "question": "Capital of Spain?", "is_impossible": True,
         "answers": [],
         "plausible_answers": [{"text": "Paris", "answer_start": 1}]},
    ]}]}]}


def test_official_squad_v2_json(tmp_path):
    path = write(tmp_path / "dev-v2.0.json", json.dumps(SQUAD_V2))
    ds = ll.load_local(get_task("squad_v2"), {"validation": path},
                       "squad_json")
    rows = ds["validation"].to_list()
    assert rows[0] == {
        "id": "a1", "title": "Paris",
        "context": " Paris is the capital of France.",  # not stripped
        "question": "Capital?",
        "answers": {"text": ["Paris", "Paris"], "answer_start": [1, 1]}}
    assert rows[1]["answers"] == {"text": [], "answer_start": []}
    assert ds["validation"].features == ll.features(get_task("squad_v2"))


def test_squad_v1_refuses_unanswerable_questions(tmp_path):
    path = write(tmp_path / "dev.json", json.dumps(SQUAD_V2))
    with pytest.raises(ll.DataFormatError, match="'a2' has no answer.*"
                                                 "squad_v2"):
        ll.load_local(get_task("squad"), {"validation": path}, "squad_json")


def test_squad_in_jsonl_and_csv(tmp_path):
    row = {"id": "q", "title": "T", "context": "Hi there.",
           "question": "Who?",
           "answers": {"text": ["there"], "answer_start": [3]}}
    jsonl = write(tmp_path / "a.jsonl", json.dumps(row) + "\n")
    csv = write(tmp_path / "a.csv", "id,context,question,answers\n"
                'q,Hi there.,Who?,"{""text"": [""there""], '
                '""answer_start"": [3]}"\n')
    for path, fmt in ((jsonl, "jsonl"), (csv, "csv")):
        ds = ll.load_local(get_task("squad"), {"train": path}, fmt)
        expected = {**row, "title": "T" if fmt == "jsonl" else ""}
        assert ds["train"].to_list() == [expected]


# ------------------------------------------------------------------- errors

def one_line(err):
    message = str(err.value)
    assert "\n" not in message
    return message


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
