"""The profiles' layering: profiles/xeon with its cluster file, a missing
cluster file named, no default profile merged, Slurm's allocation sizes."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.workflow import BIN, REPO, write_config
from workflow.scripts.data import demo
from workflow.scripts.settings.model_id import fetched_dir

sys.path.insert(0, str(REPO / "tests" / "netns"))

def profile_run(work: Path, profile: str, *args: str, check: bool = True) -> str:
    """Snakemake with one of the repository's profiles; targets go before
    --configfile (it takes several values)."""
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
            "--profile", str(REPO / "profiles" / profile), *args]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work, timeout=300)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    return done.stdout + done.stderr


def profile_experiment(work: Path, **extra) -> Path:
    data = work / "mrpc"
    demo.write_mrpc_demo(data, n_train=16, n_dev=8, seed=1)
    (work / fetched_dir("tiny", "some/model")).mkdir(parents=True)  # fetched by an earlier run: the Hub is offline
    return write_config(work / "exp.yaml", {
        "experiment": "tiny", "task": "mrpc", "model": "some/model",
        "data": {"format": "glue_tsv", "train": str(data / "train.tsv"), "validation": str(data / "dev.tsv")},
        **extra})


def test_xeon_profile_layers_its_cluster_file_and_keeps_the_cores(tmp_path):
    """cluster.yaml overrides config.yaml, the experiment overrides it; with
    `cores: all` in the profile, -j 4 caps jobs and keeps this node's cores."""
    (tmp_path / "hostfile").write_text("localhost\nlocalhost\n")
    experiment = profile_experiment(tmp_path, distributed={"processes_per_node": 1})
    log = profile_run(tmp_path, "xeon", "-j", "4", "results/tiny/default/config/train.json",
                      "--configfile", str(experiment))
    dist = json.loads((tmp_path / "results/tiny/default/config/train.json").read_text())["distributed"]
    assert (dist["hostfile"], dist["nodes"], dist["processes_per_node"]) == ("hostfile", 2, 1)
    from snakemake.utils import available_cpu_count

    assert f"Provided cores: {available_cpu_count()}" in log


def test_missing_cluster_file_is_named(tmp_path):
    experiment = profile_experiment(tmp_path)
    log = profile_run(tmp_path, "xeon", "-n", "--configfile", str(experiment), "--config", "cluster=nope.yaml",
                      check=False)
    assert "cluster file not found" in log and "nope.yaml" in log


def test_no_default_profile_to_merge():
    """Snakemake merges a workflow's profiles/default into every --profile."""
    assert not (REPO / "profiles" / "default").exists()


def dry_run_resources(log: str) -> dict[tuple[str, str], dict]:
    """(rule, run) -> resources, from a dry run's job blocks."""
    found = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", log):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        run = re.search(r"wildcards: .*run=([\w-]+)", block)
        resources = re.search(r"resources: (.*)", block)
        if rule and run and resources:
            pairs = (item.split("=", 1) for item in resources.group(1).split(", "))
            found[rule.group(1), run.group(1)] = {k: v for k, v in pairs}
    return found


def test_slurm_dry_run_sizes_the_allocations(tmp_path):
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        message = "snakemake-executor-plugin-slurm is not installed (make venv installs it)"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    experiment = profile_experiment(tmp_path, sweep={"nodes": [2, 1], "processes_per_node": [2, 1]})
    log = profile_run(tmp_path, "slurm", "-np", "--configfile", str(experiment))  # -p: every job's block
    jobs = dry_run_resources(log)
    train = {run: jobs["train_ddp", run] for run in ("n2-ppn2", "n2-ppn1", "n1-ppn2", "n1-ppn1")}
    assert {k: train["n2-ppn2"].get(k) for k in ("mpi", "nodes", "tasks_per_node", "tasks", "cpus_per_task")} == \
        {"mpi": "1", "nodes": "2", "tasks_per_node": "2", "tasks": None, "cpus_per_task": "16"}
    assert (train["n2-ppn1"]["tasks"], train["n2-ppn1"].get("tasks_per_node")) == ("2", None)
    assert train["n1-ppn2"]["tasks_per_node"] == "2" and train["n1-ppn2"]["nodes"] == "1"
    assert train["n1-ppn1"]["mpi"] == "0"  # one rank: Snakemake's own job step runs it
    check = jobs["environment_check", "n2-ppn2"]
    assert (check["mpi"], check["nodes"], check["tasks"], check["cpus_per_task"]) == ("1", "2", "2", "1")
    assert jobs["environment_check", "n1-ppn1"]["mpi"] == "0"


