"""The real workflow end to end: Snakemake, mpirun with 2 ranks, a tiny model."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from helpers.workflow import BIN, REPO, snakemake, tiny_experiment, write_config
from workflow.scripts.data.model_copy import fetched_dir

SUMMARY_KEYS = {
    "run", "nodes", "processes_per_node", "world_size", "threads_per_process", "backend", "mpi",
    "precision", "epochs", "steps", "train_seconds", "train_samples_per_second", "final_loss", "eval",
}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_model_dir):
    """One real run of the whole chain, shared by the tests below."""
    work = tmp_path_factory.mktemp("wf")
    configfile = tiny_experiment(work, tiny_model_dir)
    done = snakemake(work, configfile)
    return work, configfile, done


def test_summary_has_contract_fields(tiny_run):
    work, _, _ = tiny_run
    summary = json.loads((work / "results/tiny/summary.json").read_text())
    (run,) = summary["runs"]
    assert set(run) >= SUMMARY_KEYS
    assert run["world_size"] == 2 and run["processes_per_node"] == 2 and run["nodes"] == 1
    assert run["backend"] == "gloo" and run["precision"] == "fp32"
    assert run["mpi"].startswith("intel ")
    assert run["steps"] == 12  # 96 pairs / (8 x 2 ranks) = 6 steps per epoch, 2 epochs
    assert run["train_samples_per_second"] > 0 and run["final_loss"] > 0
    assert 0.0 <= run["eval"]["fp32"]["accuracy"] <= 1.0
    assert {"f1", "samples_per_second"} <= set(run["eval"]["fp32"])
    assert run["eval"]["fp32"]["samples"] == 40
    assert run["eval"]["int8"] is None


def test_ranks_stay_synchronized_and_use_their_threads(tiny_run):
    work, _, _ = tiny_run
    metrics = json.loads((work / "results/tiny/default/train_metrics.json").read_text())
    ranks = metrics["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    assert metrics["process_started_at"] < metrics["first_step_at"]  # startup, for bench/startup.py
    # Snakemake gives the job OMP_NUM_THREADS=2 (its threads); each rank must get its own 1.
    assert all(r["omp_num_threads"] == "1" and r["torch_threads"] == 1 for r in ranks)
    # evaluation.every is unset: no evaluation during training (test_best_model.py turns it on)
    assert metrics["evaluation"] is None
    rule_log = (work / "logs/train_ddp/tiny/default.log").read_text()
    assert "evaluation during training: off" in rule_log and "evaluation at step" not in rule_log
    for rank in (0, 1):
        log = (work / f"logs/train_ddp/tiny/default/rank{rank}.log").read_text()
        assert f"rank {rank}/2" in log


def test_saved_model_loads_with_auto_classes(tiny_run):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model_dir = tiny_run[0] / "results/tiny/default/model"
    assert (model_dir / "model.safetensors").is_file()
    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert model.config.num_labels == 2
    assert model(**tokenizer("a", "b", return_tensors="pt")).logits.shape == (1, 2)


def test_environment_json_records_the_machine(tiny_run):
    env = json.loads((tiny_run[0] / "results/tiny/default/environment.json").read_text())
    assert env["versions"]["torch"].startswith("2.13")
    assert env["mpi"]["flavour"] == "intel"
    assert env["physical_cores"] >= 1 and isinstance(env["isa_flags"], list)
    assert env["backend"] == "gloo" and "oneccl" in env["backend_reason"]


def test_each_step_writes_only_its_own_outputs(tiny_run):
    """The tokenize step maps in memory: datasets would write its cache files
    into the data step's folder, an output of another rule."""
    raw = tiny_run[0] / "results/tiny/data/raw"
    assert raw.is_dir() and not list(raw.rglob("cache-*.arrow"))


def test_nothing_to_do_when_nothing_changed(tiny_run):
    work, configfile, _ = tiny_run
    done = snakemake(work, configfile, "--dry-run")
    assert "Nothing to be done" in done.stdout + done.stderr


def test_changing_evaluation_only_does_not_retrain(tiny_run, tmp_path):
    work, configfile, _ = tiny_run
    import yaml

    config = yaml.safe_load(configfile.read_text())
    config["evaluation"] = {"batch_size": 7}
    changed = write_config(tmp_path / "changed.yaml", config)
    trained = (work / "results/tiny/default/train_metrics.json").stat().st_mtime_ns
    done = snakemake(work, changed)
    log = done.stdout + done.stderr
    assert "evaluate_fp32" in log and "rule train_ddp" not in log
    assert (work / "results/tiny/default/train_metrics.json").stat().st_mtime_ns == trained


@pytest.mark.parametrize("section, key, value, message", [
    ("train", "batchsize", 3, "unknown key 'train.batchsize'"),
    (None, "task", "mrpcc", "task: 'mrpcc' is not allowed"),
    ("train", "batch_size", 0, "train.batch_size: 0 is less than the minimum of 1"),
    ("distributed", "processes_per_node", -2, "distributed.processes_per_node: -2"),
    ("train", "epochs", "three", "train.epochs: 'three' is not of type 'number'"),
])
def test_bad_config_stops_before_any_rule(tmp_path, tiny_model_dir, section, key, value, message):
    import yaml

    configfile = tiny_experiment(tmp_path, tiny_model_dir)
    config = yaml.safe_load(configfile.read_text())
    (config[section] if section else config)[key] = value
    write_config(configfile, config)
    done = snakemake(tmp_path, configfile, check=False)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert not (tmp_path / "results").exists()


def test_push_to_hub_offline_stops_before_any_rule(tmp_path, tiny_model_dir):
    """deploy.push_to_hub with HF_HUB_OFFLINE=1 (as every test runs): refused in one line, nothing trains."""
    import yaml

    configfile = tiny_experiment(tmp_path, tiny_model_dir)
    write_config(configfile, {**yaml.safe_load(configfile.read_text()), "deploy": {"push_to_hub": "me/tiny"}})
    done = snakemake(tmp_path, configfile, check=False)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "deploy.push_to_hub" in line]
    assert len(errors) == 1 and "HF_HUB_OFFLINE is set" in errors[0], done.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()


@pytest.mark.parametrize("dry", [False, True], ids=["run", "dry-run"])
def test_hub_model_offline_and_not_cached_stops_at_the_config_check(tmp_path, tiny_model_dir, dry):
    """A Hub id the run cannot have (offline, not in the cache, no such
    folder): the last line names it and what to do; nothing is written.
    A process of its own: the forked ones keep the forkserver's HF_HOME."""
    import yaml

    configfile = tiny_experiment(tmp_path, tiny_model_dir)
    write_config(configfile, {**yaml.safe_load(configfile.read_text()), "model": "bert-base-uncased"})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),  # an empty cache
           "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "-d", str(tmp_path), "--profile",
            str(REPO / "profiles/local"), "--cores", "2", *(["--dry-run"] if dry else []), "--configfile", configfile]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: config error: model: cannot fetch 'bert-base-uncased'"), done.stderr
    assert "HF_HUB_OFFLINE is set" in last and "not in the Hugging Face cache" in last
    assert "`hf download bert-base-uncased`" in last and "set model: to a local folder" in last
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()


def test_missing_data_file_is_named(tmp_path, tiny_model_dir):
    configfile = tiny_experiment(tmp_path, tiny_model_dir)
    (tmp_path / "mrpc/dev.tsv").unlink()
    done = snakemake(tmp_path, configfile, check=False)
    assert done.returncode != 0
    assert "data.validation: file not found" in done.stderr


def test_default_config_without_network_says_what_to_do(tmp_path):
    """config.yaml fetches its model and data from the Hub: offline, the
    config check stops it in one last line that names the model and what to
    do, before anything is written."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "-d", str(tmp_path),
                           "--cores", "1", "results/mrpc/data/raw"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "cannot fetch 'distilbert-base-uncased'" in last and "HF_HUB_OFFLINE" in last
    assert "`make demo` runs offline" in last
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()


@pytest.mark.parametrize("experiment", sorted((REPO / "experiments").glob("*.yaml")), ids=lambda p: p.name)
def test_every_experiment_dry_runs(tmp_path, experiment):
    """Each under a cluster of 8 nodes of 64 threads (the machines are the
    profile's; here given on the command line), with the files it reads and
    its Hub models fetched (the Hub is offline here)."""
    import yaml

    config = yaml.safe_load(experiment.read_text())
    for model in {config["model"], *(config.get("sweep") or {}).get("model", [])}:
        if not model.startswith("pkg:"):  # fetched by an earlier run: the Hub is not asked
            (tmp_path / fetched_dir(config["experiment"], model)).mkdir(parents=True)
    (tmp_path / "hostfile").write_text("".join(f"node{i}\n" for i in range(1, 9)))
    for name in ("train-v1.1", "dev-v1.1", "train-v2.0", "dev-v2.0"):
        (tmp_path / "data/squad").mkdir(parents=True, exist_ok=True)
        (tmp_path / f"data/squad/{name}.json").write_text("{}")
    machines = "distributed={hostfile: hostfile, threads_per_process: 64}"
    done = snakemake(tmp_path, None, "--dry-run", "--config", machines, "--configfile", str(experiment))
    assert "summary.json" in done.stdout + done.stderr


def test_lint_is_clean():
    done = subprocess.run([str(BIN / "snakemake"), "--lint", "--snakefile", str(REPO / "Snakefile"),
                           "--configfile", str(REPO / "experiments/demo.yaml")],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0 and "Congratulations" in done.stdout + done.stderr, done.stdout + done.stderr
