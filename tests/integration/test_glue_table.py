"""The accuracy table through the real workflow: experiments/demo-glue-table.yaml
(its generated GLUE archive, a task and seed sweep) with a tiny model and a
few steps; an interrupted sweep trains only the runs without a result, and
the table is rebuilt from the runs that exist, marking the missing cells."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers.workflow import REPO, snakemake, write_config

EXPERIMENT = "demo-glue-table"


def table_experiment(work: Path, model: Path) -> Path:
    """The demo table, small: 2 tasks (a two-metric one, a regression) x 2
    seeds, one rate, 2 steps each."""
    config = yaml.safe_load((REPO / "experiments" / f"{EXPERIMENT}.yaml").read_text())
    config["model"] = str(model)
    config["data"]["generate"] = {"train": 64, "validation": 32, "seed": 0}
    config["train"].update(max_steps=2, batch_size=8, learning_rate=1e-3, log_every=1)
    config["distributed"]["threads_per_process"] = 1
    config["sweep"] = {"task": ["mrpc", "stsb"], "seed": [1, 2]}
    return write_config(work / "table.yaml", config)


@pytest.fixture(scope="module")
def table_run(tmp_path_factory, tiny_model_dir):
    work = tmp_path_factory.mktemp("glue-table")
    configfile = table_experiment(work, tiny_model_dir)
    snakemake(work, configfile)
    return work, configfile


def test_the_table_has_every_task_seed_and_the_glue_score(table_run):
    work, _ = table_run
    results = work / "results" / EXPERIMENT
    summary = json.loads((results / "summary.json").read_text())
    assert [r["run"] for r in summary["runs"]][:2] == ["mrpc-s1", "mrpc-s2"]
    assert summary["runs"][0]["sweep"] == {"task": "mrpc", "seed": 1}
    (row,) = summary["table"]["rows"]
    assert set(row["cells"]) == {"mrpc", "stsb"} and all(c["n"] == 2 for c in row["cells"].values())
    assert set(row["cells"]["stsb"]["metrics"]) == {"pearson", "spearmanr", "score"}
    assert row["glue"]["tasks"] == ["mrpc", "stsb"] and "rte" in row["glue"]["missing"]
    text = (results / "table.md").read_text()
    assert "MRPC (F1/acc)" in text and "STSB (Pearson/Spearman)" in text and "lr 0.001, n=2" in text
    assert "GLUE score over 2 of 9 tasks; missing: cola, sst2, qqp, mnli, qnli, rte, wnli" in text
    assert (results / "table.csv").read_text().startswith("row,task,metric")
    assert (results / "report" / "seeds.png").stat().st_size > 0
    # the tokenized data is shared per task (one per task, not per run)
    assert sorted(p.parent.parent.name for p in (results / "data").glob("*/*/tokenized")) == ["mrpc", "stsb"]


def test_an_interrupted_sweep_trains_only_the_missing_runs(table_run):
    work, configfile = table_run
    results = work / "results" / EXPERIMENT
    # As if the sweep had stopped before stsb-s2: neither it nor the outputs
    # made after every run (summary, table, report) exist. (With those left,
    # Snakemake would see nothing to do: it does not remake a deleted
    # intermediate file whose consumers are up to date.)
    for path in (results / "stsb-s2", results / "report"):
        shutil.rmtree(path)
    for name in ("summary.json", "table.md", "table.csv"):
        (results / name).unlink()
    done = subprocess.run([sys.executable, "-m", "workflow.scripts.report.table", "--config",
                           str(results / "config" / "report.json"), "--results", str(results),
                           "--out-dir", str(results / "report")], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    text = (results / "table.md").read_text()
    assert "n=1/2" in text and "1 runs have no result yet" in text
    planned = snakemake(work, configfile, "--dry-run", "--printshellcmds").stdout  # -p: every job's block
    trained = re.findall(r"rule train_ddp:\n(?:\s+\w+:.*\n)*?\s+output: (\S+)", planned)
    assert [Path(p.rstrip(",")).parent.name for p in trained] == ["stsb-s2"], planned
