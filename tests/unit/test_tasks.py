"""The task table: names, columns, labels, metrics and GLUE archive layout."""

import dataclasses

import pytest

from workflow.scripts.common import tasks

GLUE = ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli")


def test_exactly_the_supported_tasks():
    assert list(tasks.TASKS) == [*GLUE, "squad", "squad_v2", "classification", "multi_label", "regression"]


@pytest.mark.parametrize("name, columns, labels, metrics", [
    ("cola", ("sentence",), ("unacceptable", "acceptable"),
     ("matthews_correlation",)),
    ("sst2", ("sentence",), ("negative", "positive"), ("accuracy",)),
    ("mrpc", ("sentence1", "sentence2"), ("not_equivalent", "equivalent"),
     ("f1", "accuracy")),
    ("qqp", ("question1", "question2"), ("not_duplicate", "duplicate"),
     ("f1", "accuracy")),
    ("stsb", ("sentence1", "sentence2"), (), ("pearson", "spearmanr")),
    ("mnli", ("premise", "hypothesis"),
     ("entailment", "neutral", "contradiction"), ("accuracy",)),
    ("qnli", ("question", "sentence"), ("entailment", "not_entailment"),
     ("accuracy",)),
    ("rte", ("sentence1", "sentence2"), ("entailment", "not_entailment"),
     ("accuracy",)),
    ("wnli", ("sentence1", "sentence2"), ("not_entailment", "entailment"),
     ("accuracy",)),
])
def test_glue_rows_match_the_hub(name, columns, labels, metrics):
    task = tasks.get_task(name)
    assert (task.hub_path, task.hub_config) == ("nyu-mll/glue", name)
    assert task.text_columns == columns
    assert task.label_names == labels
    assert task.metrics == metrics
    assert task.main_metric == metrics[0]
    assert not task.is_qa
    assert task.num_labels == (len(labels) or 1)


def test_stsb_and_own_regression_are_the_regressions():
    assert [t.name for t in tasks.TASKS.values() if t.is_regression] == ["stsb", "regression"]



def test_mnli_has_two_validation_splits():
    mnli = tasks.get_task("mnli")
    assert mnli.validation_splits == ("validation_matched",
                                      "validation_mismatched")
    assert mnli.glue_tsv.validation_files == ("dev_matched.tsv",
                                             "dev_mismatched.tsv")
    others = [t for t in tasks.TASKS.values() if t.name != "mnli"]
    assert all(t.validation_splits == ("validation",) for t in others)


@pytest.mark.parametrize("name, hub_path", [
    ("squad", "rajpurkar/squad"), ("squad_v2", "rajpurkar/squad_v2")])
def test_squad_rows(name, hub_path):
    task = tasks.get_task(name)
    assert (task.hub_path, task.hub_config) == (hub_path, None)
    assert task.text_columns == ("question", "context")
    assert task.is_qa and task.num_labels == 0 and not task.is_regression
    assert set(task.metrics) == {"exact_match", "f1"}
    assert task.main_metric == "f1"
    assert task.glue_tsv is None


def test_glue_archive_layouts():
    cola = tasks.get_task("cola").glue_tsv
    assert not cola.has_header
    assert cola.columns == (("sentence", 3),) and cola.label == 1
    mrpc = tasks.get_task("mrpc").glue_tsv
    assert dict(mrpc.columns) == {"sentence1": "#1 String",
                                  "sentence2": "#2 String"}
    assert mrpc.label == "Quality"
    assert tasks.get_task("mnli").glue_tsv.label == "gold_label"
    assert tasks.get_task("stsb").glue_tsv.label == "score"
    for name in GLUE:  # every HF text column has a source column
        layout = tasks.get_task(name).glue_tsv
        assert [c for c, _ in layout.columns] == list(
            tasks.get_task(name).text_columns)


def test_unknown_task_lists_the_allowed_names():
    with pytest.raises(tasks.UnknownTaskError) as err:
        tasks.get_task("mnli-mm")
    message = str(err.value)
    assert isinstance(err.value, ValueError)
    assert "'mnli-mm'" in message and "\n" not in message
    assert all(name in message for name in tasks.TASKS)


def test_tasks_are_immutable_and_hashable():
    task = tasks.get_task("rte")
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.num_labels = 3
    assert len({hash(t) for t in tasks.TASKS.values()}) == len(tasks.TASKS)
