"""The demo experiment files are the workflow's checked-in test configs (the
`.test/` habit of the Snakemake catalog): each runs here as it is, through
the real workflow, shrunk only in size (fewer generated rows and steps).
demo-sweep, demo-lora, demo-glue-table and demo-news run in
test_sweep.py (the shared sweep run, tests/helpers/sweep.py), test_lora.py,
test_glue_table.py and test_own_data.py, with their own checks; demo-ccl needs the Intel env's
oneCCL and runs in `make test-intel`. Each run's model cards are read back
against deploy.json and summary.json, and no log holds a warning raised in
cpuddp's own code."""

from __future__ import annotations

import importlib.util
import json
import os
import re

import pytest

from helpers import cards
from helpers.workflow import REPO, snakemake
from workflow.scripts.common import tasks

# 3 steps teach a model almost nothing, so the int8 gate would judge noise (one
# of 32 questions is 3 points of exact match): it is widened here, and judged in test_quantize.py.
SMALL = ("data={generate: {train: 64, validation: 32, seed: 0}}", "train={max_steps: 3, log_every: 1}",
         "quantization={max_accuracy_drop: 100, calibration_samples: 8}")
# demo-squad's QA int8 from the fp32 IR is test_runtimes_path.py's (in-process):
# its run stops at evaluation and deploy.
EAGER_ONLY = ("quantization={enabled: false}",)  # replaces SMALL's quantization value
ONLY_EAGER = {"demo-squad": EAGER_ONLY}
needs_ccl = pytest.mark.skipif(importlib.util.find_spec("oneccl_bindings_for_pytorch") is None
                               or os.environ.get("CPUDDP_INTEL_STACK") != "1",
                               reason="oneCCL bindings (the Intel env): runs in `make test-intel`")


@pytest.mark.parametrize("name", ["demo", "demo-squad",
                                  pytest.param("demo-ccl", marks=[pytest.mark.intel, needs_ccl])])
def test_a_demo_experiment_runs_as_checked_in(tmp_path, name):
    snakemake(tmp_path, REPO / "experiments" / f"{name}.yaml", "--config", *SMALL, *ONLY_EAGER.get(name, ()),
              timeout=1100)
    summary = json.loads((tmp_path / f"results/{name}/summary.json").read_text())
    runs = summary["runs"]
    assert runs and all(run["train_samples_per_second"] > 0 for run in runs), runs
    for run in runs:
        folder = tmp_path / f"results/{name}/{run['run']}"
        assert (folder / "model/config.json").is_file() and run["deploy"]["candidate"], run
        assert run["eval"]["fp32"], run  # the task's metrics on the validation rows
        if (folder / "model_int8").is_dir():  # quantization ran (auto: this CPU has int8 dot products)
            assert run["eval"]["fp32_openvino"] and (run["eval"]["int8"] or run["quantization"]["note"]), run
        cards.check_deploy_card(folder / "deploy")  # deploy/'s card is what deploy/ holds (deploy.json)
        check_model_card(folder / "model", run)
    assert not own_warnings(tmp_path / "logs")  # no warning from cpuddp's own code, in any step or rank


def check_model_card(folder, run: dict) -> None:
    """model/'s card against summary.json: the packaged model by its Hub id, the evaluation's metrics,
    the data, the step that became the model."""
    card = cards.load(folder)
    metrics = {k: v for k, v in run["eval"]["fp32"].items() if k in tasks.get_task(run["deploy"]["task"]).metrics}
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2", card.data.base_model
    assert {r.metric_type: r.metric_value for r in card.data.eval_results} == metrics and metrics
    assert {k: cards.number(v) for k, v in cards.pairs(card.text, "Evaluation").items()} == metrics
    assert "from local files: train `train" in card.text  # the demo's generated files, by name
    trained = cards.pairs(card.text, "Training run")
    assert (trained["model_from_step"], trained["chosen_by"]) == (str(run["steps"]), "the final step")


def own_warnings(logs) -> list[str]:
    """Warning lines (Python's `file:line: XWarning:`) raised in cpuddp's own code, in every log under `logs`."""
    own = re.compile(rf"{re.escape(str(REPO))}/(workflow|profiles)/\S+:\d+: \w*Warning")
    return [f"{path}: {line}" for path in sorted(logs.rglob("*.log"))
            for line in path.read_text(errors="replace").splitlines() if own.search(line)]
