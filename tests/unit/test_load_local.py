"""Local data files in every format, their errors, and the Hub boundary."""

import json

import pytest

from helpers.data_files import save, write

from workflow.scripts.data import sources as ll
from workflow.scripts.common.tasks import get_task


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
