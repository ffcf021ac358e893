"""A sweep through the real workflow: one run per value, each with its own
folder and summary entry, scaling against the baseline; progress and failure
logs of the training rule.

The sweep run (experiments/demo-sweep.yaml: 1 then 2 ranks, here of the
tiny model) is the fixture `sweep_run`
(tests/helpers/sweep.py), which test_report_workflow.py and
test_compare.py read too.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from helpers.workflow import snakemake, write_config
from helpers.sweep import EXPERIMENT, RUNS
from helpers.workflow import tiny_experiment

def summary_of(work: Path) -> dict:
    return json.loads((work / f"results/{EXPERIMENT}/summary.json").read_text())


def test_each_sweep_value_is_a_run_with_its_own_folder(sweep_run):
    work, _ = sweep_run
    for run in RUNS:
        folder = work / f"results/{EXPERIMENT}/{run}"
        for name in ("train_metrics.json", "eval_fp32.json", "environment.json", "model/config.json"):
            assert (folder / name).is_file(), f"{run}: {name}"
    assert (work / f"logs/train_ddp/{EXPERIMENT}/ppn1/rank0.log").is_file()
    assert not (work / f"logs/train_ddp/{EXPERIMENT}/ppn1/rank1.log").exists()
    assert (work / f"logs/train_ddp/{EXPERIMENT}/ppn2/rank1.log").is_file()


def test_summary_has_one_entry_per_run_baseline_first(sweep_run):
    summary = summary_of(sweep_run[0])
    assert summary["baseline"] == "ppn1"
    assert [r["run"] for r in summary["runs"]] == RUNS
    assert [r["world_size"] for r in summary["runs"]] == [1, 2]
    assert [r["processes_per_node"] for r in summary["runs"]] == [1, 2]
    assert all(r["threads_per_process"] == 1 and r["steps"] == 3 for r in summary["runs"])
    assert all(r["deploy"]["candidate"] and r["eval"]["fp32"] for r in summary["runs"]), summary["runs"]


def test_speedup_and_efficiency_against_the_baseline(sweep_run):
    base, two = summary_of(sweep_run[0])["runs"]
    assert (base["speedup"], base["ideal_speedup"], base["scaling_efficiency"]) == (1.0, 1.0, 1.0)
    expected = two["train_samples_per_second"] / base["train_samples_per_second"]
    assert two["speedup"] == pytest.approx(expected, abs=1e-3)
    assert two["ideal_speedup"] == 2.0  # 2 ranks x 1 thread against 1 x 1
    assert two["scaling_efficiency"] == pytest.approx(two["speedup"] / 2, abs=1e-3)


def test_rank0_progress_has_samples_per_second_and_eta(sweep_run):
    log = (sweep_run[0] / f"logs/train_ddp/{EXPERIMENT}/ppn2.log").read_text()
    progress = [line for line in log.splitlines() if "samples/s" in line and "ETA" in line]
    assert progress and re.search(r"step 3/3 .*[\d.]+ samples/s \| ETA \d+:\d\d:\d\d", progress[-1]), log


def test_a_new_sweep_value_trains_only_the_new_run(sweep_run, tmp_path):
    work, configfile = sweep_run
    config = yaml.safe_load(configfile.read_text())
    config["sweep"]["processes_per_node"] = [1, 2, 3]
    done = snakemake(work, write_config(tmp_path / "three.yaml", config), "--dry-run",
                     "--printshellcmds")  # with every job's block
    planned = re.findall(r"rule train_ddp:\n(?:\s+\w+:.*\n)*?\s+output: (\S+)", done.stdout)
    assert [Path(p.rstrip(",")).parent.name for p in planned] == ["ppn3"], done.stdout


def test_failed_training_shows_the_failing_rank_log(tmp_path, tiny_model_dir):
    """A rank that cannot load its model: Snakemake's output names the rank's log and shows its tail."""
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    configfile = tiny_experiment(tmp_path, broken, max_steps=2)
    config = yaml.safe_load(configfile.read_text())
    config["distributed"]["retries"] = 0  # how one failed try is reported; tries are test_self_healing.py's
    done = snakemake(tmp_path, write_config(configfile, config), check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Error in rule train_ddp" in output, output[-3000:]
    assert re.search(r"rank[01]\.log", output), output[-3000:]
    assert re.search(r"rank [01]/2 via", output), output[-3000:]  # a line of the rank's own log
    assert not (tmp_path / "results/tiny/default/train_metrics.json").exists()
