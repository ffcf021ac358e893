"""A profile keeps its cluster whatever the command line adds; experiment
files hold recipes, never machines; a recipe's fixed threads are checked
against the profile's nodes; Slurm's `auto` threads are the cluster's number."""

from __future__ import annotations

import pytest
import yaml

from helpers.workflow import REPO
from workflow.scripts.settings import config as cfg
from workflow.scripts.settings import profiles, recipe
from workflow.helpers import plan_lines
from workflow.helpers.plan_lines import run_line

EXPERIMENTS = sorted((REPO / "experiments").glob("*.yaml"))
# The machines: the profile's cluster file says these, an experiment never.
MACHINE_KEYS = {"hostfile", "threads_per_process", "mpi", "mpirun", "launcher", "launcher_args", "env"}


@pytest.mark.parametrize("argv, env, want", [
    (["snakemake", "--profile", "profiles/xeon", "--config", "task=qnli"], {}, "profiles/xeon"),
    (["snakemake", "--profile=profiles/slurm", "--configfile", "x.yaml"], {}, "profiles/slurm"),
    (["snakemake", "-n"], {"SNAKEMAKE_PROFILE": "profiles/xeon"}, "profiles/xeon"),
    (["snakemake", "-n"], {}, None),
])
def test_the_profile_is_found_on_the_command_line(argv, env, want):
    assert profiles.profile_arg(argv, env) == want


@pytest.mark.parametrize("profile, cluster", [("xeon", "profiles/xeon/cluster.yaml"),
                                              ("slurm", "profiles/slurm/cluster.yaml"), ("local", None)])
def test_a_command_line_config_does_not_drop_the_profiles_cluster(profile, cluster, monkeypatch):
    """`--config task=qnli` replaces the profile's `config:` list: the
    cluster is read from the profile's own file instead."""
    monkeypatch.chdir(REPO)
    argv = ["snakemake", "--profile", f"profiles/{profile}", "--config", "task=qnli"]
    assert profiles.cluster_of({"task": "qnli"}, argv, {}) == cluster


def test_jobs_get_the_cluster_from_the_main_process():
    assert profiles.cluster_of({}, ["snakemake"], {profiles.CLUSTER_ENV: "profiles/slurm/cluster.yaml"}) \
        == "profiles/slurm/cluster.yaml"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_files_name_no_machines(path):
    dist = (yaml.safe_load(path.read_text()).get("distributed") or {})
    assert not MACHINE_KEYS & set(dist), f"{path.name}: machine keys belong to the profile's cluster file"


def blog(**dist) -> dict:
    config = yaml.safe_load((REPO / "experiments/blog-mrpc-nodes.yaml").read_text())
    config["distributed"].update(dist)
    return cfg.validate(config)


def test_a_recipes_threads_become_the_runs():
    config = blog()
    recipe.apply_required_threads(config, cores=32)
    assert config["distributed"]["threads_per_process"] == 28


@pytest.mark.parametrize("dist, cores, said", [({}, 16, "16 physical cores per node / 1 ranks gives 16"),
                                               ({"threads_per_process": 16}, 64, "threads_per_process 16")])
def test_nodes_that_cannot_give_a_recipes_threads_stop_with_one_line(dist, cores, said):
    with pytest.raises(recipe.RecipeError) as err:
        recipe.apply_required_threads(blog(**dist), cores=cores)
    assert said in str(err.value) and "needs 28 threads" in str(err.value) and "\n" not in str(err.value)


def slurm(tmp_path, experiment: dict) -> dict:
    """An experiment under profiles/slurm's cluster file, as the Snakefile layers them."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for layer in (yaml.safe_load((REPO / "profiles/slurm/cluster.yaml").read_text()), experiment):
        for key, value in layer.items():
            config[key] = {**config[key], **value} if isinstance(value, dict) and config.get(key) else value
    config["cluster"] = str(REPO / "profiles/slurm/cluster.yaml")
    return cfg.load_config(config, tmp_path)


def test_slurm_auto_threads_are_the_clusters_cpus_per_task(tmp_path):
    done = slurm(tmp_path, {"distributed": {"threads_per_process": "auto"}})
    assert done["distributed"]["threads_per_process"] == 16  # profiles/slurm/cluster.yaml


def test_slurm_tuned_threads_are_still_refused(tmp_path):
    with pytest.raises(cfg.ConfigError, match="cluster file"):
        slurm(tmp_path, {"distributed": {"threads_per_process": "tuned"}})


def test_the_run_line_says_where_and_how(tmp_path):
    (tmp_path / "hostfile").write_text("a\nb\nc\nd\n")
    config = cfg.validate({"task": "qnli", "model": "m", "distributed": {"hostfile": "hostfile", "nodes": 2}})
    line = run_line("default", config, "results/qnli", None, tmp_path)
    assert "using 2 of the hostfile's 4 nodes" in line
    for part in ("ranks x threads measured (processes_per_node auto", "backend auto", "MPI auto",
                 "precision auto", "results in results/qnli/default/"):
        assert part in line
    config["distributed"].update(processes_per_node=2)
    assert "2 rank(s) per node, threads auto (cores / ranks)" in run_line("default", config, "r", None, tmp_path)
    config["distributed"].update(processes_per_node="auto", threads_per_process=4)
    assert "cores / 4 rank(s) per node (processes_per_node auto)" in run_line("default", config, "r", None, tmp_path)


def test_the_run_line_names_every_precision_the_schema_takes():
    for precision in cfg.load_schema()["properties"]["train"]["properties"]["precision"]["enum"]:
        config = cfg.validate({"task": "qnli", "model": "m", "train": {"precision": precision}})
        assert f"precision {precision}" in run_line("default", config, "results/qnli", None)


@pytest.mark.parametrize("argv, brief", [(["snakemake", "-n"], True), (["snakemake", "--dry-run", "-j", "4"], True),
                                         (["snakemake", "-np"], False), (["snakemake", "-n", "-p"], False),
                                         (["snakemake", "--profile", "profiles/xeon"], False)])
def test_a_dry_run_leaves_the_job_blocks_out_unless_p(argv, brief):
    import logging

    from snakemake_interface_logger_plugins.common import LogEvent

    logger = logging.getLogger(f"cpuddp-test-{len(argv)}-{brief}")
    assert plan_lines.brief_dry_run(argv, logger) is brief
    def record(message, event):
        return logger.makeRecord(logger.name, logging.INFO, "", 0, message, None, None, extra={"event": event})

    block, table = record("rule x:", LogEvent.JOB_INFO), record("Job stats:", LogEvent.RUN_INFO)
    assert logger.filter(block) is not brief and logger.filter(table)
    logger.filters.clear()
