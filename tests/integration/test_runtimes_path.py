"""Eager fp32, OpenVINO fp32 and OpenVINO int8 side by side on this CPU,
whatever it is: a tiny BERT that has learned a task (trained in-process, so
here and not in the unit lane), its three models measured, the speed gate,
the deployed model; and SQuAD through the same path. No test asserts a
timing: only that the numbers exist and that the decisions follow from them.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard

from helpers.cpu_flags import EPYC_ZEN2
from workflow.scripts.common import tasks
from workflow.scripts.probes import hardware
from workflow.scripts.settings import config as cfg
from workflow.scripts.common.errors import UserError
from workflow.scripts.infer import (artifacts, convert, deploy, evaluate, int8, policy, quantize, runtime, runtimes,
                                    shapes, speed, stacks)

def write(path, value) -> str:
    path.write_text(json.dumps(value))
    return str(path)


EVALUATION = {"batch_size": 16, "n_best_size": 20, "max_answer_length": 30, "null_score_diff_threshold": 0.0}
ENVIRONMENT = {"precision": "fp32", "backend": "gloo", "threads_per_process": 1, "nodes": 1, "processes_per_node": 1}


def prepare(work, model_dir, tokenized, raw, task: str, **quantization) -> dict:
    """The fp32 evaluation, the OpenVINO fp32 model and the int8 folder of a run."""
    paths = {"model": str(model_dir), "data": str(tokenized), "raw": str(raw),
             "env": write(work / "env.json", ENVIRONMENT),
             "evaluate": write(work / "evaluate.json", {"task": task, "evaluation": EVALUATION})}
    evaluate.main(["--config", paths["evaluate"], "--environment", paths["env"], "--model", paths["model"],
                   "--data", paths["data"], "--raw", paths["raw"], "--out", str(work / "eval_fp32.json")])
    convert.main(["--config", write(work / "convert.json", {"task": task}), "--model", paths["model"],
                  "--data", paths["data"], "--out", str(work / "model_openvino")])
    quantize_into(work, paths, task, work / "model_int8", **quantization)
    return paths


def quantize_into(work, paths, task, out, enabled=True, calibration_samples=32) -> None:
    """As rule quantize_static does: the fp32 IR of convert is what is quantized."""
    settings = {"enabled": enabled, "calibration_samples": calibration_samples, "stack": "openvino"}
    quantize.main(["--config", write(work / "quantize.json", {"task": task, "quantization": settings}),
                   "--model", paths["model"], "--openvino", str(work / "model_openvino"), "--data", paths["data"],
                   "--out", str(out)])


def run_runtimes(work, paths, task, int8=None, name="eval_runtimes", **gates) -> dict:
    settings = {"enabled": True, "max_accuracy_drop": 1.0, "min_speedup": 1.0, **gates}
    config = write(work / f"{name}.config.json", {"task": task, "evaluation": EVALUATION, "quantization": settings})
    out = work / f"{name}.json"
    runtimes.main(["--config", config, "--environment", paths["env"], "--model", paths["model"],
                   "--openvino", str(work / "model_openvino"), "--int8", str(int8 or work / "model_int8"),
                   "--data", paths["data"], "--raw", paths["raw"], "--fp32-metrics", str(work / "eval_fp32.json"),
                   "--out", str(out)])
    return json.loads(out.read_text())


def run_deploy(work, paths, evaluation: str, int8=None, out="deploy") -> dict:
    config = write(work / "deploy.config.json", {"experiment": "runtimes", "task": json.loads(
        Path(paths["evaluate"]).read_text())["task"], "model": paths["model"]})
    deploy.main(["--config", config, "--environment", paths["env"], "--evaluation", str(work / evaluation),
                 "--model", paths["model"],
                 "--model-openvino", str(work / "model_openvino"), "--model-int8", str(int8 or work / "model_int8"),
                 "--out", str(work / out)])
    return json.loads((work / out / policy.DEPLOY_FILE).read_text())


@pytest.fixture(scope="module", autouse=True)
def quick_timing():
    """Fewer rows and rounds than the workflow times: these tests check fields and decisions, not speed."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(speed, "SPEED_ROWS", 64)
        patch.setattr(speed, "ROUNDS", 2)
        patch.setattr(speed, "LATENCY_ROWS", 24)
        yield


@pytest.fixture(scope="module")
def mrpc(learned):
    """The tiny BERT trained on a learnable MRPC-shaped task, its three models measured side by side."""
    work = learned
    paths = prepare(work, work / "model", work / "tokenized", work / "unused", "mrpc")
    return work, paths, run_runtimes(work, paths, "mrpc")


def eligible_fastest(result: dict) -> str:
    """What deploy/ must hold, computed here from the recorded numbers and gates."""
    evals = result["eval"]
    ok = [n for n, e in evals.items() if e and e.get("meets_accuracy_gate", True) and e.get("recommended", True)]
    return max(ok, key=lambda n: (evals[n]["samples_per_second"], -policy.CANDIDATES.index(n)))


def test_three_models_are_measured_side_by_side(mrpc):
    _, _, result = mrpc
    evals = result["eval"]
    for name in policy.CANDIDATES:
        assert {"accuracy", "f1", "samples_per_second", "latency_ms_p50", "latency_ms_p99", "runtime",
                "precision"} <= set(evals[name]), name
        assert evals[name]["samples_per_second"] > 0 and evals[name]["latency_ms_p50"] <= evals[name]["latency_ms_p99"]
        assert evals[name]["timing"] == {"rows": 64, "rounds": 2, "batch_size": 16, "latency_rows": 24}
    assert [evals[n]["runtime"] for n in policy.CANDIDATES] == ["torch", "openvino", "openvino"]
    assert [evals[n]["precision"] for n in policy.CANDIDATES] == ["fp32", "fp32", "int8"]
    assert evals["fp32"]["accuracy"] >= 0.95, "the tiny model did not learn the task"
    for name in ("fp32_openvino", "int8"):
        ev = evals[name]
        assert ev["samples"] == 200 and ev["meets_accuracy_gate"] and ev["model"] == policy.FOLDERS[name]
        by_shapes = ev["samples_per_second_by_shapes"]
        assert set(by_shapes) == set(shapes.SHAPE_MODES) and ev["samples_per_second"] == max(by_shapes.values())
        assert ev["shapes"] == max(by_shapes, key=by_shapes.get)
        assert (ev["buckets"] is None) is (ev["shapes"] == "dynamic")
        assert ev["speedup_vs_eager"] == round(ev["samples_per_second"] / evals["fp32"]["samples_per_second"], 3)


def test_speed_gate_and_note_follow_the_measurement(mrpc):
    _, _, result = mrpc
    int8, same = result["eval"]["int8"], result["eval"]["fp32_openvino"]
    ratio = round(int8["samples_per_second"] / same["samples_per_second"], 3)
    assert int8["speedup_vs_fp32_same_runtime"] == ratio == result["quantization"]["int8_over_fp32_same_runtime"]
    assert int8["recommended"] is (ratio >= 1.0) is result["quantization"]["int8_recommended"]
    support = hardware.low_precision_support(hardware.cpu_summary()["isa_flags"])
    assert result["quantization"]["int8_expected_to_pay"] is support["int8_expected_to_pay"]
    assert result["cpu"]["low_precision"] == support and result["cpu"]["tag"] in result["quantization"]["cpu"]
    assert result["deploy"]["candidate"] == eligible_fastest(result)
    assert policy.LABELS[result["deploy"]["candidate"]] in result["quantization"]["note"]
    if not int8["recommended"]:
        assert "int8 is not faster here" in result["quantization"]["note"]


def test_deploy_holds_the_fastest_and_loads_in_two_lines(mrpc):
    work, paths, result = mrpc
    (work / "model" / ".snakemake_timestamp").touch()  # Snakemake's marker: never shared with deploy/
    meta = run_deploy(work, paths, "eval_runtimes.json")
    chosen = result["deploy"]["candidate"]
    assert meta["candidate"] == chosen and meta["source"] == policy.FOLDERS[chosen]
    assert meta["samples_per_second"] == result["eval"][chosen]["samples_per_second"]
    assert meta["measured_on"] == result["cpu"]["tag"] and set(meta["metrics"]) == {"accuracy", "f1"}
    assert not (work / "deploy" / ".snakemake_timestamp").exists()
    model, tokenizer = deploy.load_deployed(work / "deploy")
    card = ModelCard.load(work / "deploy" / "README.md")  # the model card, with the deployed model's metrics
    assert card.data.library_name == "transformers" and card.data.datasets == ["nyu-mll/glue"]
    assert {r.metric_type: r.metric_value for r in card.data.eval_results} == meta["metrics"]
    assert policy.LABELS[chosen] in card.text and "## Hardware" in card.text
    assert model(**tokenizer("a b", "c", return_tensors="pt")).logits.shape == (1, 2)
    validation = datasets.load_from_disk(paths["data"])["validation"]
    logits, _ = runtime.forward_all(model, validation, 16, 0, contextlib.nullcontext)
    accuracy = float((np.stack(logits).argmax(-1) == np.array(validation["labels"])).mean())
    assert accuracy == pytest.approx(result["eval"][chosen]["accuracy"])


def test_int8_below_min_speedup_is_kept_but_not_deployed(mrpc):
    work, paths, _ = mrpc
    result = run_runtimes(work, paths, "mrpc", name="slow", min_speedup=1000)
    int8 = result["eval"]["int8"]
    assert int8 is not None and int8["recommended"] is False
    assert "int8 is not faster here" in int8["recommendation"] and "min_speedup 1000" in int8["recommendation"]
    assert result["deploy"]["candidate"] != "int8" and result["deploy"]["candidate"] == eligible_fastest(result)
    assert f"the faster artifact is {policy.LABELS[result['deploy']['candidate']]}" in result["quantization"]["note"]
    assert run_deploy(work, paths, "slow.json", out="deploy_slow")["candidate"] == result["deploy"]["candidate"]


def test_inaccurate_int8_fails_only_when_asked_for(mrpc, tmp_path):
    work, paths, _ = mrpc
    fp32 = json.loads((work / "eval_fp32.json").read_text())
    (tmp_path / "eval_fp32.json").write_text(json.dumps({**fp32, "accuracy": 1.5}))  # nobody reaches 150%
    for name in ("model_openvino", "model_int8"):
        (tmp_path / name).symlink_to(work / name)
    with pytest.raises(UserError, match=r"INT8 accuracy gate: accuracy int8 \d+\.\d\d vs fp32 150\.00"):
        run_runtimes(tmp_path, paths, "mrpc")
    result = run_runtimes(tmp_path, paths, "mrpc", enabled="auto")
    assert result["eval"]["int8"]["recommended"] is False and result["deploy"]["candidate"] == "fp32"
    assert "max_accuracy_drop" in result["eval"]["int8"]["recommendation"]


def test_auto_without_int8_instructions_skips_and_says_why(mrpc, monkeypatch):
    work, paths, _ = mrpc
    monkeypatch.setattr(hardware, "cpu_summary", lambda: {"cpu_model": "AMD EPYC 7B12", "isa_flags": EPYC_ZEN2,
                                                          "physical_cores": 1, "logical_cpus": 1, "sockets": 1})
    quantize_into(work, paths, "mrpc", work / "skipped", enabled="auto")
    assert [p.name for p in (work / "skipped").iterdir()] == [artifacts.META_FILE]
    with pytest.raises(UserError, match="holds no INT8 model: quantization.enabled auto: not quantized"):
        stacks.load_quantized(work / "skipped")
    result = run_runtimes(work, paths, "mrpc", int8=work / "skipped", name="skipped", enabled="auto")
    assert result["eval"]["int8"] is None and result["quantization"]["quantize"] is False
    assert "no int8 dot-product instructions" in result["quantization"]["note"]
    assert result["quantization"]["cpu"] == "[AMD EPYC 7B12; no vnni/amx/bf16]"
    assert result["deploy"]["candidate"] == eligible_fastest(result) != "int8"


def recording(calls: list):
    """A stand-in for int8.quantize that records the decision it gets and returns what quantize returns."""
    def quantize_(*args, **kwargs):
        calls.append(kwargs["decision"])
        return {"quantized": True, "decision": kwargs["decision"]}
    return quantize_


def test_true_without_int8_instructions_still_quantizes_and_says_so(mrpc, monkeypatch, capsys):
    work, paths, _ = mrpc
    monkeypatch.setattr(hardware, "cpu_summary", lambda: {"cpu_model": "AMD EPYC 7B12", "isa_flags": EPYC_ZEN2,
                                                          "physical_cores": 1, "logical_cpus": 1, "sockets": 1})
    calls = []
    monkeypatch.setattr(int8, "quantize", recording(calls))
    quantize_into(work, paths, "mrpc", work / "forced", enabled=True)
    (decision,) = calls
    assert decision["quantize"] is True and "int8 is not expected to be faster here" in decision["reason"]
    assert "int8 is not expected to be faster here" in capsys.readouterr().err


def test_auto_on_this_cpu_follows_its_flags(mrpc, monkeypatch):
    work, paths, result = mrpc
    calls = []
    monkeypatch.setattr(int8, "quantize", recording(calls))
    quantize_into(work, paths, "mrpc", work / "auto", enabled="auto")
    pays = hardware.low_precision_support(hardware.cpu_summary()["isa_flags"])["int8_expected_to_pay"]
    if pays:
        assert len(calls) == 1 and "int8 expected to pay" in calls[0]["reason"]
    else:
        assert not calls and not artifacts.is_quantized(work / "auto")
    # the real run of the fixture (enabled true) recorded the same reading of this CPU
    assert result["quantization"]["int8_expected_to_pay"] is pays


def test_bucketed_shapes_give_the_dynamic_outputs(mrpc):
    work, paths, _ = mrpc
    validation = datasets.load_from_disk(paths["data"])["validation"]
    dynamic = convert.load_converted(work / "model_openvino")
    bucketed = convert.load_converted(work / "model_openvino", "buckets", [16, 32], 0)
    a, _ = runtime.forward_all(dynamic, validation, 16, 0, contextlib.nullcontext)
    b, _ = runtime.forward_all(bucketed, validation, 16, 0, contextlib.nullcontext)
    assert np.allclose(np.stack(a), np.stack(b), atol=1e-4)


# ---------------------------------------------------------------- SQuAD, the same path

def test_squad_goes_through_the_same_path_and_gates(tmp_path, tiny_model_dir):
    from helpers.native_files import write_native
    from helpers.workflow import task_experiment
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from workflow.scripts.data import load as data, tokenize as tokenize_data

    files = write_native("squad", tmp_path / "files", 24, 8)
    config = write(tmp_path / "data.json", cfg.validate(task_experiment("squad", tiny_model_dir, files)))
    data.main(["--config", config, "--out", str(tmp_path / "raw")])
    tokenize_data.main(["--config", config, "--data", str(tmp_path / "raw"), "--out", str(tmp_path / "tok")])
    torch.manual_seed(0)
    AutoModelForQuestionAnswering.from_pretrained(tiny_model_dir).save_pretrained(tmp_path / "model")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(tmp_path / "model")
    paths = prepare(tmp_path, tmp_path / "model", tmp_path / "tok", tmp_path / "raw", "squad", calibration_samples=8)
    result = run_runtimes(tmp_path, paths, "squad", max_accuracy_drop=100)  # an untrained model: any answer
    for name in policy.CANDIDATES:
        assert {"exact_match", "f1", "samples_per_second", "latency_ms_p99"} <= set(result["eval"][name]), name
    assert result["eval"]["int8"]["samples"] == result["eval"]["fp32"]["samples"]
    assert result["deploy"]["candidate"] == eligible_fastest(result)
    assert (tmp_path / "eval_runtimes_int8_predictions.json").is_file()
    run_deploy(tmp_path, paths, "eval_runtimes.json")
    model, tokenizer = deploy.load_deployed(tmp_path / "deploy")
    inputs = tokenizer("who?", "the river and the city", return_tensors="pt")
    out = model(**inputs)
    assert out.start_logits.shape == out.end_logits.shape == inputs["input_ids"].shape


def test_squad_task_metrics_are_named_for_the_gate():
    assert set(tasks.get_task("squad").metrics) == {"exact_match", "f1"}
