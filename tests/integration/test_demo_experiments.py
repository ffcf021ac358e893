"""The demo experiment files are the workflow's checked-in test configs (the
`.test/` habit of the Snakemake catalog): each runs here as it is, through
the real workflow, shrunk only in size (fewer generated rows and steps).
demo-sweep, demo-lora, demo-glue-table and demo-news run in
test_sweep.py (the shared sweep run, tests/helpers/sweep.py), test_lora.py,
test_glue_table.py and test_own_data.py, with their own checks; demo-ccl needs the Intel env's
oneCCL and runs in `make test-intel`."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from helpers.workflow import REPO, snakemake

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
