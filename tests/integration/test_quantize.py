"""Static INT8 quantization: the workflow end to end (OpenVINO fp32, int8,
the side-by-side evaluation, deploy/), the artifact, the gate.
test_runtimes.py tests the decisions on every kind of CPU."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
import torch
import yaml

from helpers.workflow import snakemake, write_config
from helpers.workflow import tiny_experiment
from workflow.scripts.common import tasks
from workflow.scripts.probes import hardware
from workflow.scripts.infer import artifacts, gate, int8, runtime, stacks
from workflow.scripts.common.errors import UserError

MRPC = tasks.get_task("mrpc")


# ---------------------------------------------------------------- the workflow

@pytest.fixture(scope="module")
def quantized_run(tmp_path_factory, tiny_model_dir):
    """One real run with quantization on: train, quantize, evaluate both."""
    work = tmp_path_factory.mktemp("wfq")
    configfile = tiny_experiment(work, tiny_model_dir)
    config = yaml.safe_load(configfile.read_text())
    # The tiny model learns little: the gate is tested on its own below.
    config["quantization"] = {"enabled": True, "calibration_samples": 32, "max_accuracy_drop": 100}
    write_config(configfile, config)
    done = snakemake(work, configfile)
    return work, configfile, done


def test_workflow_quantizes_and_evaluates_int8(quantized_run):
    work, _, done = quantized_run
    log = done.stdout + done.stderr
    for rule in ("convert_openvino", "quantize_static", "evaluate_runtimes", "deploy_model"):
        assert f"rule {rule}" in log, rule
    (run,) = json.loads((work / "results/tiny/summary.json").read_text())["runs"]
    keys = {"accuracy", "f1", "samples", "samples_per_second", "latency_ms_p50", "latency_ms_p99", "runtime",
            "precision"}
    for name in ("fp32", "fp32_openvino", "int8"):
        assert keys <= set(run["eval"][name]), name
        assert run["eval"][name]["samples"] == 40
        assert 0 < run["eval"][name]["latency_ms_p50"] <= run["eval"][name]["latency_ms_p99"]
    entry = run["eval"]["int8"]
    assert {"speedup_vs_fp32_same_runtime", "speedup_vs_eager", "recommended", "shapes"} <= set(entry)
    assert entry["recommended"] is (entry["speedup_vs_fp32_same_runtime"] >= 1.0)


def test_summary_says_what_int8_does_on_this_cpu(quantized_run):
    work = quantized_run[0]
    (run,) = json.loads((work / "results/tiny/summary.json").read_text())["runs"]
    env = json.loads((work / "results/tiny/default/environment.json").read_text())
    support = hardware.low_precision_support(env["isa_flags"])
    assert env["low_precision"] == support and env["node_reports"][0]["low_precision"] == support
    q = run["quantization"]
    assert q["enabled"] is True and q["quantize"] is True
    assert q["int8_expected_to_pay"] is support["int8_expected_to_pay"]
    assert ("not expected to be faster here" in q["reason"]) is not support["int8_expected_to_pay"]
    assert q["min_speedup"] == 1.0 and q["int8_recommended"] is run["eval"]["int8"]["recommended"]
    if not q["int8_recommended"]:
        assert "int8 is not faster here" in q["note"] and "the faster artifact is" in q["note"]


def test_deploy_holds_the_fastest_model_that_meets_the_gates(quantized_run):
    work = quantized_run[0]
    (run,) = json.loads((work / "results/tiny/summary.json").read_text())["runs"]
    evals = run["eval"]
    eligible = [n for n, e in evals.items() if e.get("meets_accuracy_gate", True) and e.get("recommended", True)]
    fastest = max(eligible, key=lambda n: evals[n]["samples_per_second"])
    meta = json.loads((work / "results/tiny/default/deploy/deploy.json").read_text())
    assert run["deploy"]["candidate"] == meta["candidate"] == fastest
    assert meta["samples_per_second"] == evals[fastest]["samples_per_second"]
    assert run["deploy"]["path"].endswith("results/tiny/default/deploy")
    from workflow.scripts.infer.deploy import load_deployed

    model, tokenizer = load_deployed(work / "results/tiny/default/deploy")
    assert model(**tokenizer("a", "b", return_tensors="pt")).logits.shape == (1, 2)
    from huggingface_hub import ModelCard

    deployed = ModelCard.load(work / "results/tiny/default/deploy/README.md")  # the card of what ships
    assert {r.metric_type: r.metric_value for r in deployed.data.eval_results} == meta["metrics"]
    assert deployed.data.model_name == "tiny-default" and "int8" in deployed.text
    # the BERT family's run (test_architectures.py runs the others)
    saved = json.loads((work / "results/tiny/default/model/config.json").read_text())
    assert saved["model_type"] == "bert" and saved["id2label"] == {"0": "not_equivalent", "1": "equivalent"}
    trained = ModelCard.load(work / "results/tiny/default/model/README.md")  # written at save time, then evaluated
    assert trained.data.base_model == deployed.data.base_model
    assert {r.metric_type: r.metric_value for r in trained.data.eval_results} == {
        k: evals["fp32"][k] for k in ("accuracy", "f1")}


def test_artifact_is_verified_and_int8(quantized_run):
    artifact = quantized_run[0] / "results/tiny/default/model_int8"
    meta = json.loads((artifact / artifacts.META_FILE).read_text())
    assert (artifact / artifacts.IR_FILE).is_file() and (artifact / "openvino_model.bin").is_file()
    assert meta["stack"] == "openvino" and meta["calibration_samples"] == 32
    assert meta["source_ir"] == "results/tiny/default/model_openvino"  # converted once, by convert_openvino
    assert meta["versions"]["openvino"] and meta["versions"]["nncf"]
    assert meta["verification"] == {"rows": 40, "max_abs_diff": 0.0}
    # 2 layers x (q, k, v, attention output, intermediate, output) + pooler + classifier
    assert meta["int8_linear_layers"] == meta["linear_layers"] == 14


def test_artifact_reloads_and_answers_like_a_model(quantized_run):
    import datasets

    work = quantized_run[0]
    validation = datasets.load_from_disk(str(work / "results/tiny/data/tokenized"))["validation"]
    first = stacks.load_quantized(work / "results/tiny/default/model_int8")
    second = stacks.load_quantized(work / "results/tiny/default/model_int8")
    a, _ = runtime.forward_all(first, validation, 16, 0, contextlib.nullcontext)
    b, _ = runtime.forward_all(second, validation, 16, 0, contextlib.nullcontext)
    assert np.stack(a).shape == (40, 2)
    assert int8.max_abs_diff(a, b) == 0.0


def test_nothing_to_do_after_a_quantized_run(quantized_run):
    work, configfile, _ = quantized_run
    done = snakemake(work, configfile, "--dry-run")
    assert "Nothing to be done" in done.stdout + done.stderr, done.stdout[-3000:]


def test_gate_setting_does_not_requantize(quantized_run, tmp_path):
    work, configfile, _ = quantized_run
    config = yaml.safe_load(configfile.read_text())
    config["quantization"].update(max_accuracy_drop=50, min_speedup=1.5)
    changed = write_config(tmp_path / "gate.yaml", config)
    log = snakemake(work, changed, "--dry-run").stdout
    assert "evaluate_runtimes" in log and "deploy_model" in log
    assert "quantize_static" not in log and "convert_openvino" not in log and "train_ddp" not in log
    config["quantization"]["enabled"] = "auto"  # decided again on this CPU, never retrained
    log = snakemake(work, write_config(tmp_path / "auto.yaml", config), "--dry-run").stdout
    assert "quantize_static" in log and "train_ddp" not in log and "evaluate_fp32" not in log


def test_quantization_off_leaves_int8_null_and_no_rule(tmp_path, tiny_model_dir):
    configfile = tiny_experiment(tmp_path, tiny_model_dir)
    log = snakemake(tmp_path, configfile, "--dry-run").stdout
    assert "quantize_static" not in log and "evaluate_runtimes" not in log and "convert_openvino" not in log
    assert "deploy_model" in log


# ---------------------------------------------------------------- a learnable task

def _accuracy(model, split) -> float:
    logits, _ = runtime.forward_all(model, split, 32, 0, contextlib.nullcontext)
    return float((np.stack(logits).argmax(-1) == np.array(split["labels"])).mean())


def test_int8_keeps_the_accuracy_of_a_learned_task(learned, tmp_path):
    import datasets

    meta = int8.quantize(learned / "model", learned / "tokenized", tmp_path / "int8", "mrpc", 64)
    assert meta["verification"]["max_abs_diff"] == 0.0 and meta["calibration_samples"] == 64
    validation = datasets.load_from_disk(str(learned / "tokenized"))["validation"]
    fp32 = _accuracy(runtime.load_for_eval(str(learned / "model"), MRPC), validation)
    quantized = _accuracy(stacks.load_quantized(tmp_path / "int8"), validation)
    assert fp32 >= 0.95, f"the tiny model did not learn the task ({fp32})"
    gate.check_accuracy_gate(MRPC, {"accuracy": fp32}, {"accuracy": quantized}, max_drop=1.0)


def test_failed_verification_keeps_no_artifact(learned, tmp_path, monkeypatch):
    monkeypatch.setattr(int8, "max_abs_diff", lambda a, b: 0.5)
    with pytest.raises(UserError, match="reloaded INT8 model differs"):
        int8.quantize(learned / "model", learned / "tokenized", tmp_path / "int8", "mrpc", 8)
    assert not (tmp_path / "int8").exists()
    assert not list(tmp_path.glob(".int8.*"))


# ---------------------------------------------------------------- units

def test_gate_names_both_numbers_and_passes_within_the_limit():
    gate.check_accuracy_gate(MRPC, {"accuracy": 0.86, "f1": 0.90}, {"accuracy": 0.855, "f1": 0.895}, 1.0)
    with pytest.raises(UserError) as err:
        gate.check_accuracy_gate(MRPC, {"accuracy": 0.86, "f1": 0.90}, {"accuracy": 0.84, "f1": 0.90}, 1.0)
    assert "accuracy int8 84.00 vs fp32 86.00 (-2.00 points)" in str(err.value)
    assert "f1" not in str(err.value).split("max_accuracy_drop")[0]


def test_gate_reads_squad_percentages_and_mnli_mismatched():
    squad = tasks.get_task("squad")
    gate.check_accuracy_gate(squad, {"exact_match": 80.0, "f1": 88.0}, {"exact_match": 79.5, "f1": 87.2}, 1.0)
    with pytest.raises(UserError, match="exact_match int8 78.00 vs fp32 80.00"):
        gate.check_accuracy_gate(squad, {"exact_match": 80.0, "f1": 88.0}, {"exact_match": 78.0, "f1": 88.0}, 1.0)
    mnli = tasks.get_task("mnli")
    drops = gate.accuracy_drops(mnli, {"accuracy": 0.8, "accuracy_mm": 0.8, "samples_per_second": 9},
                                    {"accuracy": 0.8, "accuracy_mm": 0.7, "samples_per_second": 30})
    assert drops == pytest.approx({"accuracy": 0.0, "accuracy_mm": 10.0})


def test_max_abs_diff_of_rows_and_qa_pairs():
    a = [np.array([1.0, 2.0]), np.array([0.0, 0.0])]
    assert int8.max_abs_diff(a, [x.copy() for x in a]) == 0.0
    assert int8.max_abs_diff(a, [a[0], np.array([0.0, -0.25])]) == 0.25
    qa = [(np.zeros(3), np.ones(3))]
    assert int8.max_abs_diff(qa, [(np.zeros(3), np.ones(3) * 2)]) == 1.0
    assert int8.max_abs_diff(qa, [(np.zeros(2), np.ones(3))]) == float("inf")


def test_missing_artifact_says_what_to_do(tmp_path):
    with pytest.raises(UserError, match="not a finished INT8 artifact"):
        stacks.load_quantized(tmp_path)


def test_ipex_stack_without_ipex_names_what_to_install(monkeypatch, learned, tmp_path):
    from workflow.scripts.probes import intel

    monkeypatch.setattr(intel, "installed_versions", lambda: {"torch": torch.__version__, intel.IPEX_MODULE: None,
                                                              intel.CCL_PACKAGE: None})
    with pytest.raises(UserError, match="intel-extension-for-pytorch"):
        int8.quantize(learned / "model", learned / "tokenized", tmp_path / "int8", "mrpc", 8, stack="ipex")


def test_calibration_rows_are_seeded_and_capped():
    import datasets

    train = datasets.Dataset.from_dict({"input_ids": [[101, i, 102] for i in range(10)], "labels": [0] * 10})
    rows = int8.calibration_rows(train, 4)
    assert rows == int8.calibration_rows(train, 4) and len(rows) == 4 and set(rows[0]) == {"input_ids"}
    assert len(int8.calibration_rows(train, 50)) == 10
