"""`make report/plan/compare PROFILE=...`: an experiment read under a profile's
cluster file, as Snakemake layers it, needs no hostfile under Slurm."""

from __future__ import annotations

import pytest

from workflow.scripts.settings import profiles
from workflow.scripts.common.errors import UserError
from workflow.scripts.report import compare

EXPERIMENT = profiles.ROOT / "experiments" / "blog-mrpc-nodes.yaml"


def test_slurm_profile_puts_srun_under_the_experiment():
    config = profiles.experiment_config(EXPERIMENT, "profiles/slurm")
    assert config["distributed"]["launcher"] == "srun"
    assert config["experiment"] == "blog-mrpc-nodes"
    assert config["train"]["batch_size"] == 32  # the experiment's value wins over config.yaml


def test_local_profile_has_no_cluster_file():
    assert profiles.cluster_file("profiles/local") is None
    assert profiles.cluster_file("profiles/xeon").name == "cluster.yaml"


def test_unknown_profile_is_one_line():
    with pytest.raises(UserError, match="profile not found"):
        profiles.cluster_file("profiles/nowhere")


def test_merge_is_nested_and_leaves_inputs_alone():
    base = {"distributed": {"nodes": 2, "hostfile": "h"}, "task": "mrpc"}
    merged = profiles.merge(base, {"distributed": {"nodes": 4}})
    assert merged == {"distributed": {"nodes": 4, "hostfile": "h"}, "task": "mrpc"}
    assert base["distributed"]["nodes"] == 2


def test_compare_reads_the_experiment_under_the_slurm_profile(tmp_path):
    side = compare.load_side("blog-mrpc-nodes", tmp_path, profile="profiles/slurm")
    assert side.nodes == {"n1": 1, "n2": 2, "n4": 4}
    assert side.summary is None and side.figures()
