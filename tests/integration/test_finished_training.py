"""A finished training is never lost, and a resume continues only the same
work: a rank killed while rank 0 saves the final model costs no training
(the rerun resumes at the last step and trains nothing), and a training
file changed between a failed try and the rerun starts fresh, saying why.
Real Snakemake, launcher and ranks; the kill is the rank's own fault point
(CPUDDP_FAULT, workflow/scripts/train/fault_point.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from helpers.faults import RUN, digest
from helpers.workflow import snakemake, tiny_experiment, write_config
from workflow.scripts.train import checkpoint

STEPS = 12  # 96 rows, 2 epochs, 8 per rank x 2 ranks
RULE_LOG = Path("logs/train_ddp/tiny/default.log")
TRAINED = str(RUN / "train_metrics.json")  # the training is what these tests are about: no later stage runs


def experiment(work: Path, model: Path) -> Path:
    """No retry by the workflow itself: the fault would strike every try alike."""
    configfile = tiny_experiment(work, model, checkpoint_every=5)  # the last step is no multiple: no checkpoint there
    config = yaml.safe_load(configfile.read_text())
    config["distributed"]["retries"] = 0
    return write_config(configfile, config)


def fail_while_saving(work: Path, model: Path, monkeypatch) -> Path:
    """A run whose rank 1 is killed after the final checkpoint, while rank 0 saves the model."""
    configfile = experiment(work, model)
    with monkeypatch.context() as patch:
        patch.setenv("CPUDDP_FAULT", "final-save:1")
        done = snakemake(work, configfile, TRAINED, check=False)
    assert done.returncode != 0, done.stdout[-3000:]
    assert "rank 1 on " in done.stderr + done.stdout
    assert not (work / RUN / "model").exists()  # Snakemake deletes a failed job's outputs
    assert (work / RUN / f"checkpoints/step-{STEPS:08d}/COMPLETE").is_file()  # what survives
    return configfile


def test_a_rank_killed_while_the_model_is_saved_costs_no_training(tmp_path, tiny_model_dir, monkeypatch):
    reference, broken = tmp_path / "reference", tmp_path / "broken"
    reference.mkdir(), broken.mkdir()
    snakemake(reference, experiment(reference, tiny_model_dir), TRAINED)
    straight = json.loads((reference / RUN / "train_metrics.json").read_text())
    assert not (reference / RUN / "checkpoints").exists()  # removed once the model is in place

    configfile = fail_while_saving(broken, tiny_model_dir, monkeypatch)
    snakemake(broken, configfile, TRAINED)
    metrics = json.loads((broken / RUN / "train_metrics.json").read_text())
    assert metrics["resumed_from_step"] == STEPS and metrics["steps"] == STEPS
    assert digest(broken) == digest(reference)
    # The speed of the training that happened (kept in the final checkpoint), not of zero steps.
    assert metrics["train_samples"] == straight["train_samples"] and metrics["train_samples_per_second"] > 0
    assert metrics["process_started_at"] < metrics["first_step_at"]
    log = (broken / RULE_LOG).read_text()
    rerun = log[log.rindex(f"resumed from results/tiny/default/checkpoints/step-{STEPS:08d}"):]
    assert f"the training was complete at step {STEPS}" in rerun
    assert not re.search(r"step \d+/\d+ \|", rerun), "the rerun must train nothing"
    assert not (broken / RUN / "checkpoints").exists()
    tries = json.loads((broken / RUN / "tries.json").read_text())
    assert tries[-1]["outcome"] == "ok" and tries[-1]["resumed_from_step"] == STEPS


def test_a_changed_training_file_starts_fresh_and_says_why(tmp_path, tiny_model_dir, monkeypatch):
    """...and keeps the superseded checkpoints aside, where the line says, listed in summary.json."""
    configfile = fail_while_saving(tmp_path, tiny_model_dir, monkeypatch)
    earlier = {p.name: checkpoint.info(p)["files"] for p in checkpoint.valid(tmp_path / RUN / "checkpoints")}
    config = yaml.safe_load(configfile.read_text())
    config["quantization"] = {"enabled": False}  # not the training's: the summary comes sooner
    write_config(configfile, config)
    train = tmp_path / "mrpc" / "train.tsv"
    lines = train.read_text().splitlines()
    lines[1] = ("0" if lines[1][0] == "1" else "1") + lines[1][1:]  # one label fixed
    train.write_text("\n".join(lines) + "\n")
    done = snakemake(tmp_path, configfile, "results/tiny/summary.json")
    why = (f"checkpoint step-{STEPS:08d} was trained on other data (train tokens digest differs): "
           "starting fresh")
    log = (tmp_path / RULE_LOG).read_text()
    assert why in log, log[-3000:]
    [line] = [line for line in log.splitlines() if "was trained on other data" in line]
    assert why in done.stdout + done.stderr
    metrics = json.loads((tmp_path / RUN / "train_metrics.json").read_text())
    assert metrics["resumed_from_step"] is None and metrics["steps"] == STEPS
    kept = re.search(r"is kept in (\S+) \(`rm -rf (\S+)` deletes", line)
    assert kept and kept.group(2) == str(RUN / "superseded"), line
    assert Path(kept.group(1)).parent == RUN / "superseded" and Path(kept.group(1)).name.startswith("data-")
    for name, files in earlier.items():  # every one, whole
        moved = tmp_path / kept.group(1) / name
        assert checkpoint.info(moved)["files"] == files and checkpoint.damage(moved, checkpoint.info(moved)) is None
    [entry] = json.loads((tmp_path / "results/tiny/summary.json").read_text())["runs"]
    assert entry["superseded_checkpoints"] == [f"{kept.group(1)}/{name}" for name in sorted(earlier)]
