"""The Intel stack for real: torch 2.8 + IPEX 2.8, 2 ranks through the workflow.

Runs only inside the Intel env, which `make test-intel` builds and marks
with CPUDDP_INTEL_STACK=1; the main env has neither IPEX nor the torch it
pairs with, so there it is skipped.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from conftest import snakemake, write_config
from workflow.scripts.data import demo
from workflow.scripts.common import hardware, intel

pytestmark = pytest.mark.skipif(os.environ.get("CPUDDP_INTEL_STACK") != "1",
                                reason="needs the Intel env (torch 2.8 + IPEX 2.8): run `make test-intel`")
RUN = "results/tiny/default"


@pytest.fixture(scope="module")
def ipex_run(tmp_path_factory, tiny_model_dir):
    """One workflow run with the defaults: ipex auto, precision auto, backend auto."""
    versions = intel.installed_versions()
    assert versions[intel.IPEX_MODULE], "CPUDDP_INTEL_STACK=1 but IPEX is not installed; run `make intel-venv`"
    work = tmp_path_factory.mktemp("intel")
    data = work / "mrpc"
    demo.write_mrpc_demo(data, n_train=96, n_dev=40, seed=1)
    configfile = write_config(work / "tiny.yaml", {
        "experiment": "tiny",
        "task": "mrpc",
        "model": str(tiny_model_dir),
        "data": {"format": "glue_tsv", "train": str(data / "train.tsv"), "validation": str(data / "dev.tsv")},
        "train": {"epochs": 2, "batch_size": 8, "learning_rate": 1e-3, "max_seq_length": 64, "log_every": 2},
        "distributed": {"processes_per_node": 2, "threads_per_process": 1},
    })
    snakemake(work, configfile)
    return work


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_environment_picks_ipex_and_records_why(ipex_run):
    env = read_json(ipex_run / RUN / "environment.json")
    assert env["versions"]["torch"].startswith("2.8.")
    assert env["versions"][intel.IPEX_MODULE].startswith("2.8.")
    assert env["ipex"] is True and env["ipex_reason"].startswith("auto: intel_extension_for_pytorch 2.8")
    assert env["backend"] == "gloo" and "oneccl" in env["backend_reason"]
    native = hardware.has_native_bf16(hardware.cpu_summary()["isa_flags"])
    assert env["precision"] == ("bf16" if native else "fp32") or "measured" in env["precision_reason"]


def test_every_rank_trained_with_ipex(ipex_run):
    env = read_json(ipex_run / RUN / "environment.json")
    for rank in (0, 1):
        log = (ipex_run / f"logs/train_ddp/tiny/default/rank{rank}.log").read_text()
        assert "; ipex on (auto: intel_extension_for_pytorch 2.8" in log
        replaced = re.search(rf"IPEX optimized the model for training \({env['precision']}\): (\d+) modules", log)
        assert replaced, log
        if env["precision"] == "bf16":  # fp32 AdamW training: IPEX has no kernel to swap in
            assert int(replaced.group(1)) > 0, log


def test_ipex_training_stays_in_sync_and_learns(ipex_run):
    metrics = read_json(ipex_run / RUN / "train_metrics.json")
    assert metrics["ipex"] is True
    assert metrics["steps"] == 12  # 96 pairs / (8 x 2 ranks) x 2 epochs
    assert math.isfinite(metrics["final_loss"]) and metrics["train_samples_per_second"] > 0
    first, second = metrics["ranks"]
    assert first["weights_sha256"] == second["weights_sha256"]


def test_evaluation_used_ipex_inference(ipex_run):
    log = (ipex_run / "logs/evaluate_fp32/tiny/default.log").read_text()
    assert re.search(r"IPEX optimized the model for inference \(\w+\): [1-9]\d* modules replaced", log), log
    result = read_json(ipex_run / RUN / "eval_fp32.json")
    assert result["samples"] == 40 and 0.0 <= result["accuracy"] <= 1.0


def test_summary_and_saved_model(ipex_run):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    (run,) = read_json(ipex_run / "results/tiny/summary.json")["runs"]
    assert run["world_size"] == 2 and run["eval"]["fp32"]["samples"] == 40
    model_dir = ipex_run / RUN / "model"
    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    assert next(model.parameters()).dtype == torch.float32  # plain fp32 weights, not IPEX's packed ones
    logits = model(**AutoTokenizer.from_pretrained(model_dir)("a", "b", return_tensors="pt")).logits
    assert logits.shape == (1, 2)
