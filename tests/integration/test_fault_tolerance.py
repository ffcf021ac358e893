"""A rank killed mid-training, exact resume, and bad input through the real workflow."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
import yaml

from helpers.workflow import BIN, REPO, snakemake, write_config
from helpers.faults import RUN, digest, long_experiment
from helpers.workflow import tiny_experiment
from helpers.background import Background

def rank_pid(rank: int, timeout: float = 60) -> int:
    """The pid of training rank `rank` (read from the launcher's environment)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for proc in psutil.Process().children(recursive=True):  # this test's, not a neighbour's
            try:
                cmd = " ".join(proc.cmdline())
                env = proc.environ()
            except psutil.Error:
                continue
            if "workflow.scripts.train.rank" in cmd and env.get("PMI_RANK") == str(rank):
                return proc.pid
        time.sleep(0.05)
    raise AssertionError(f"no training rank {rank} found")


def wait_for(path: Path, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        if time.time() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.02)


def test_killed_rank_stops_the_job_and_rerun_resumes_exactly(tmp_path, tiny_model_dir, long_reference):
    broken = tmp_path / "broken"
    broken.mkdir()
    configfile = long_experiment(broken, tiny_model_dir)
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "-d", str(broken),
            "--profile", str(REPO / "profiles/local"), "--cores", "2", "--configfile", str(configfile)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    with Background(argv, env=env) as job:
        wait_for(broken / RUN / "checkpoints/step-00000040/COMPLETE")
        os.kill(rank_pid(1), signal.SIGKILL)
        started = time.time()
        out, _ = job.communicate(timeout=300)
    assert job.returncode != 0
    assert time.time() - started < 120, "a dead rank must stop the job quickly"
    assert "rank 1 on " in out and "died without an exit status" in out, out[-3000:]
    assert not (broken / RUN / "train_metrics.json").exists()
    assert not (broken / RUN / "model").exists()

    snakemake(broken, configfile)
    metrics = json.loads((broken / RUN / "train_metrics.json").read_text())
    assert metrics["resumed_from_step"] >= 40 and metrics["steps"] == 200
    summary = json.loads((broken / "results/tiny/summary.json").read_text())
    assert summary["runs"][0]["resumed_from_step"] == metrics["resumed_from_step"]
    assert digest(broken) == long_reference


def test_absurd_learning_rate_stops_with_step_and_rank(tmp_path, tiny_model_dir):
    configfile = tiny_experiment(tmp_path, tiny_model_dir, learning_rate=1e12)
    done = snakemake(tmp_path, configfile, check=False)
    assert done.returncode != 0
    assert "non-finite loss" in done.stderr and "lower train.learning_rate" in done.stderr
    assert not (tmp_path / RUN / "model").exists()


def edit(configfile: Path, change) -> Path:
    config = yaml.safe_load(configfile.read_text())
    change(config)
    return write_config(configfile, config)


def failing_run(tmp_path, model, change, *targets) -> str:
    configfile = edit(tiny_experiment(tmp_path, model), change)
    done = snakemake(tmp_path, configfile, *targets, check=False)
    assert done.returncode != 0
    assert not (tmp_path / "results/tiny/summary.json").exists()
    return done.stderr + done.stdout


def test_model_folder_without_weights(tmp_path, tiny_model_dir):
    empty = tmp_path / "no-weights"
    empty.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (empty / name).write_bytes((tiny_model_dir / name).read_bytes())
    log = failing_run(tmp_path, tiny_model_dir, lambda c: c.update(model=str(empty)))
    assert "has no weights (model.safetensors)" in log
    # A retry cannot fix it: only the first try started ranks, the others ended at once with its line.
    first, *retries = json.loads((tmp_path / RUN / "tries.json").read_text())
    assert first["retry_can_fix"] is False and retries, first
    assert all(t["error"].startswith(f"try {t['try']} not started, a retry cannot fix this: rank 0 ")
               and t["seconds"] < 5 for t in retries), retries
    assert not list((tmp_path / "logs/train_ddp/tiny/default/try-2").glob("rank*.log"))


def test_tokenizer_that_does_not_match_the_model(tmp_path, tiny_model_dir):
    from transformers import BertConfig, BertModel

    small = tmp_path / "small-vocab"
    BertModel(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=1,
                         intermediate_size=16)).save_pretrained(small)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (small / name).write_bytes((tiny_model_dir / name).read_bytes())
    log = failing_run(tmp_path, tiny_model_dir, lambda c: c.update(model=str(small)))
    assert "tokenizer and model do not match" in log


def test_empty_training_file(tmp_path, tiny_model_dir):
    def empty_train(config):
        Path(config["data"]["train"]).write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
    log = failing_run(tmp_path, tiny_model_dir, empty_train)
    assert "train.tsv" in log and "empty" in log.lower()


def test_missing_columns_are_named(tmp_path, tiny_model_dir):
    def wrong_columns(config):
        Path(config["data"]["train"]).write_text("a\tb\n1\t2\n")
    log = failing_run(tmp_path, tiny_model_dir, wrong_columns)
    assert "train.tsv" in log and "#1 String" in log


def test_label_out_of_range(tmp_path, tiny_model_dir):
    def bad_label(config):
        path = Path(config["data"]["train"])
        lines = path.read_text().splitlines()
        lines[1] = "7" + lines[1][1:]
        path.write_text("\n".join(lines) + "\n")
    log = failing_run(tmp_path, tiny_model_dir, bad_label)
    assert "train.tsv" in log and "7" in log


@pytest.mark.parametrize("hostfile_text, nodes, message", [
    ("a;touch {marker}\n", 1, "is not a host name"),
    ("$(touch {marker})\n", 1, "is not a host name"),
    ("node1\n", 2, "distributed.nodes is 2 but hostfile"),
])
def test_hostfile_problems_stop_before_any_rule(tmp_path, tiny_model_dir, hostfile_text, nodes, message):
    marker = tmp_path / "injected"
    hostfile = tmp_path / "hosts"
    hostfile.write_text(hostfile_text.format(marker=marker))
    log = failing_run(tmp_path, tiny_model_dir, lambda c: c["distributed"].update(
        hostfile=str(hostfile), nodes=nodes, processes_per_node=1))
    assert message in log
    assert not marker.exists() and not (tmp_path / "results").exists()


def test_unresolvable_first_node_is_named(tmp_path, tiny_model_dir):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("no-such-node.invalid\n")
    log = failing_run(tmp_path, tiny_model_dir, lambda c: c["distributed"].update(
        hostfile=str(hostfile), nodes=1, processes_per_node=2))
    assert "no-such-node.invalid" in log


def test_malformed_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("experiment: x\ntask: [mrpc\n")
    done = snakemake(tmp_path, bad, "--dry-run", check=False)
    assert done.returncode != 0 and "not valid JSON or YAML" in done.stdout + done.stderr


def test_shell_metacharacters_in_rank_env_reach_ranks_verbatim(tmp_path, tiny_model_dir):
    marker = tmp_path / "pwned"
    configfile = edit(tiny_experiment(tmp_path, tiny_model_dir, max_steps=2),
                      lambda c: c["distributed"].update(env={"CPUDDP_NOTE": f"x; touch {marker}"}))
    snakemake(tmp_path, configfile, str(RUN / "train_metrics.json"))  # the variable reaches the ranks only
    assert not marker.exists()
