"""Your own data end to end: a generated 4-class news CSV (labels 1-4)
through the whole workflow on two ranks, INT8 and deploy included; the
model carries the label names, so a pipeline shows them."""

from __future__ import annotations

import json

import yaml

from helpers.workflow import REPO, snakemake, write_config


def test_own_csv_from_nothing_to_deploy(tmp_path, tiny_model_dir):
    config = yaml.safe_load((REPO / "experiments/demo-news.yaml").read_text())
    config.update(model=str(tiny_model_dir))
    config["data"]["generate"] = {"train": 96, "validation": 32, "seed": 0}
    config["train"].update(epochs=1, batch_size=8, learning_rate=1e-3, checkpoint_every=0)
    config["quantization"] = {"enabled": True, "calibration_samples": 16, "max_accuracy_drop": 100}
    snakemake(tmp_path, write_config(tmp_path / "news.yaml", config))

    (run,) = json.loads((tmp_path / "results/demo-news/summary.json").read_text())["runs"]
    assert run["world_size"] == 2 and run["steps"] == 6
    assert list(run["eval"]["fp32"])[:2] == ["f1_macro", "accuracy"]  # evaluation.metric leads
    assert "f1" not in run["eval"]["fp32"]  # binary f1 only for two classes
    for name in ("fp32_openvino", "int8"):  # a 4-class head through OpenVINO, and quantized
        assert {"f1_macro", "accuracy"} <= set(run["eval"][name]) and run["eval"][name]["samples"] == 32, name
    model = tmp_path / "results/demo-news/default/model"
    saved = json.loads((model / "config.json").read_text())
    assert saved["id2label"] == {"0": "1", "1": "2", "2": "3", "3": "4"} and saved["label2id"]["4"] == 3
    deploy = json.loads((tmp_path / "results/demo-news/default/deploy/deploy.json").read_text())
    assert deploy["task"] == "classification"

    from transformers import pipeline
    classify = pipeline("text-classification", model=str(model))
    assert classify("Shares rose on the Nasdaq after it unveiled a new smartphone.")[0]["label"] in {"1", "2", "3", "4"}
