"""Every task, by configuration alone: native files -> load -> tokenize ->
a few real DDP training steps -> evaluation with the task's metrics.

All eleven tasks run the stages' own entry points in this process (one
rank, gloo); MNLI and SQuAD v2, whose shapes differ most from MRPC (two
validation splits and word labels; QA features, n-best post-processing
and predictions), also run through Snakemake and mpirun with 2 ranks.
"""

from __future__ import annotations

import json

import datasets
import pytest

from helpers.native_files import write_native
from helpers.ranks import single_rank
from helpers.workflow import snakemake, task_experiment, write_config
from workflow.scripts.settings import config as cfg
from workflow.scripts.data import load as data, tokenize as tokenize_data
from workflow.scripts.nodes import describe as environment
from workflow.scripts.settings.views import EnvironmentView
from workflow.scripts.infer import evaluate
from workflow.scripts.common import tasks
from workflow.scripts.train import rank as train

N_TRAIN, N_DEV = 48, 16
METRIC_KEYS = {
    "cola": {"matthews_correlation"},
    "sst2": {"accuracy"},
    "mrpc": {"accuracy", "f1"},
    "qqp": {"accuracy", "f1"},
    "stsb": {"pearson", "spearmanr"},
    "mnli": {"accuracy", "accuracy_mm"},
    "qnli": {"accuracy"},
    "rte": {"accuracy"},
    "wnli": {"accuracy"},
    "squad": {"exact_match", "f1"},
    "squad_v2": {"exact_match", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"},
    "classification": {"accuracy", "f1_macro"},
    "multi_label": {"f1_micro", "f1_macro", "subset_accuracy"},
    "regression": {"pearson", "spearmanr", "mse"},
}


def test_every_task_is_covered():
    assert set(METRIC_KEYS) == set(tasks.TASKS)


def dump(path, value) -> str:
    path.write_text(json.dumps(value))
    return str(path)


@pytest.mark.parametrize("task", list(METRIC_KEYS))
def test_task_end_to_end(task, tmp_path, tiny_model_dir, monkeypatch):
    single_rank(monkeypatch)
    config = cfg.validate(task_experiment(task, tiny_model_dir, write_native(task, tmp_path / "files", N_TRAIN, N_DEV)))
    meta = tasks.get_task(task)
    conf = dump(tmp_path / "config.json", config)
    view = EnvironmentView.pick(config)
    info = dump(tmp_path / "environment.json", environment.describe(view.distributed, view.train, launcher=False))

    data.main(["--config", conf, "--out", str(tmp_path / "raw")])
    raw = datasets.load_from_disk(str(tmp_path / "raw"))
    meta = tasks.for_data(task, raw["train"].features)  # own data: the labels found in the training file
    assert list(raw) == ["train", *meta.validation_splits]
    assert raw["train"].num_rows == N_TRAIN or meta.is_qa
    if not meta.is_qa:
        assert all(raw[s].num_rows == N_DEV for s in meta.validation_splits)
        label = getattr(raw["train"].features["label"], "feature", raw["train"].features["label"])
        assert (label.dtype == "float32") if meta.is_regression else (label.names == list(meta.label_names))
        labels = [tuple(y) if meta.multi_label else y for y in raw["train"]["label"]]
        distinct = (3 if meta.own else 2) if meta.is_regression else 6 if meta.multi_label else meta.num_labels
        assert len(set(labels)) == distinct

    tokenize_data.main(["--config", conf, "--data", str(tmp_path / "raw"), "--out", str(tmp_path / "tok")])
    train.main(["--config", conf, "--environment", info, "--data", str(tmp_path / "tok"),
                "--out", str(tmp_path / "run"), "--log-dir", str(tmp_path / "logs")])
    trained = json.loads((tmp_path / "run/train_metrics.json").read_text())
    features = datasets.load_from_disk(str(tmp_path / "tok"))["train"].num_rows
    assert trained["steps"] == -(-features // 8) >= 2
    assert all(loss == loss for _, loss in trained["loss_history"])  # finite, one point per step
    assert len(trained["loss_history"]) == trained["steps"]

    out = tmp_path / "run/eval_fp32.json"
    evaluate.main(["--config", conf, "--environment", info, "--model", str(tmp_path / "run/model"),
                   "--data", str(tmp_path / "tok"), "--raw", str(tmp_path / "raw"), "--out", str(out)])
    result = json.loads(out.read_text())
    assert METRIC_KEYS[task] <= set(result)
    questions = raw[meta.validation_splits[0]].num_rows
    assert result["samples"] == (questions if meta.is_qa else N_DEV * len(meta.validation_splits))
    if meta.is_qa:
        predictions = json.loads((tmp_path / "run/eval_fp32_predictions.json").read_text())
        assert set(predictions) == set(raw["validation"]["id"])
        assert all(isinstance(text, str) for text in predictions.values())
        assert all(0.0 <= result[k] <= 100.0 for k in METRIC_KEYS[task])
    elif meta.is_regression or task == "cola":
        assert all(-1.0 <= result[k] <= 1.0 for k in METRIC_KEYS[task] - {"mse"})
    else:
        assert all(0.0 <= result[k] <= 1.0 for k in METRIC_KEYS[task])


@pytest.mark.parametrize("task", ["mnli", "squad_v2", "multi_label", "regression"])
def test_task_through_the_workflow_on_two_ranks(task, tmp_path, tiny_model_dir):
    files = write_native(task, tmp_path / "files", 64, N_DEV)
    configfile = write_config(tmp_path / f"{task}.yaml", task_experiment(task, tiny_model_dir, files, 2))
    snakemake(tmp_path, configfile)
    run = tmp_path / f"results/every-{task}/default"
    (summary,) = json.loads((tmp_path / f"results/every-{task}/summary.json").read_text())["runs"]
    assert summary["world_size"] == 2 and summary["steps"] >= 2
    assert METRIC_KEYS[task] <= set(summary["eval"]["fp32"])
    ranks = json.loads((run / "train_metrics.json").read_text())["ranks"]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    if task == "squad_v2":
        predictions = json.loads((run / "eval_fp32_predictions.json").read_text())
        dev = json.loads((tmp_path / "files/dev-v2.0.json").read_text())
        ids = {qa["id"] for article in dev["data"] for p in article["paragraphs"] for qa in p["qas"]}
        assert set(predictions) == ids
        assert any(not qa["answers"] for a in dev["data"] for p in a["paragraphs"] for qa in p["qas"])
