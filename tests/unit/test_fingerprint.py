"""A checkpoint resumes only the same work: the fingerprint's parts, the one
line that names what changed, and the temporary folders of dead tries."""

from __future__ import annotations

import logging
import os
import re
import socket
from pathlib import Path

import pytest
import torch

from workflow.scripts.settings.decisions import RunDecisions
from workflow.scripts.settings.levers import Levers
from workflow.scripts.settings.views import TrainView
from workflow.scripts.common import superseded
from workflow.scripts.train import checkpoint, fingerprint


@pytest.fixture
def work(tmp_path):
    """A tokenized-data folder and a model folder, as the ranks see them."""
    data, model = tmp_path / "tokens", tmp_path / "model"
    (data / "train").mkdir(parents=True)
    (data / "train" / "data-00000-of-00001.arrow").write_bytes(b"train tokens")
    (data / "validation").mkdir()
    (data / "validation" / "data-00000-of-00001.arrow").write_bytes(b"dev tokens")
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "tokenizer.json").write_text("{}")
    return data, model


def parts(work, compression="none", nodes=1, code="cpuddp", **train) -> dict:
    data, model = work
    cfg = TrainView.of({"task": "mrpc", "model": str(model),
                        "train": {"batch_size": 8, "learning_rate": 2e-5, **train},
                        "distributed": {"gradient_compression": compression}})
    decisions = RunDecisions("gloo", "fp32", 1, nodes, 2, levers=Levers.of({k: "off" for k in Levers().as_dict()}))
    return fingerprint.of(cfg, decisions, data, global_batch=32, model_code=code)


def test_the_parts_are_settings_data_model_and_step(work):
    found = parts(work)
    assert set(found) == {"settings", "data", "model", "step"}
    assert found["settings"]["global_batch"] == 32 and "batch_size" not in found["settings"]["train"]
    assert found["step"]["precision"] == "fp32" and "planned_world_size" not in found["step"]
    assert fingerprint.change(found, parts(work)) is None  # computed again: the same


def test_the_split_of_the_global_batch_and_the_cadence_do_not_count(work):
    """A retry on fewer ranks (a node dropped) keeps the global batch: it must resume."""
    assert fingerprint.change(parts(work), parts(work, nodes=2, batch_size=4, gradient_accumulation_steps=2,
                                                 checkpoint_every=7, log_every=3)) is None


def test_under_compression_the_planned_world_size_counts(work):
    before, after = parts(work, "powersgd", nodes=1), parts(work, "powersgd", nodes=2)
    assert fingerprint.change(before, after) == "with another step (planned_world_size was 2, now 4)"


def test_other_training_data_is_named_by_its_digest(work):
    data, _ = work
    before = parts(work)
    (data / "train" / "data-00000-of-00001.arrow").write_bytes(b"fixed train tokens")
    assert fingerprint.change(before, parts(work)) == "on other data (train tokens digest differs)"


def test_validation_data_and_the_tokenizer_file_do_not_count(work):
    data, model = work
    before = parts(work)
    (data / "validation" / "data-00000-of-00001.arrow").write_bytes(b"other dev tokens")
    (model / "tokenizer.json").write_text('{"x": 1}')  # the tokens' digest covers what it changes
    assert fingerprint.change(before, parts(work)) is None


def test_other_weights_and_config_are_named(work):
    _, model = work
    before = parts(work)
    (model / "model.safetensors").write_bytes(b"other weights")
    assert fingerprint.change(before, parts(work)) == \
        "from another model (model config and weights digest differs)"


def test_a_setting_is_named_with_both_values(work):
    assert fingerprint.change(parts(work), parts(work, learning_rate=3e-5)) == \
        "with other training settings (train.learning_rate was 2e-05, now 3e-05)"


def test_a_step_decision_is_named_with_both_values(work):
    before, after = parts(work), parts(work)
    after["step"]["levers"]["softmax"] = "fast"
    assert fingerprint.change(before, after) == "with another step (levers.softmax was 'off', now 'fast')"


def test_the_model_code_taken_is_part_of_the_step(work):
    """cpuddp's encoder and transformers' model name their parameters otherwise."""
    assert fingerprint.change(parts(work, code="transformers"), parts(work, code="cpuddp")) == \
        "with another step (model_code was 'transformers', now 'cpuddp')"
    assert fingerprint.change(parts(work, model_code="transformers"), parts(work)) is None  # the setting: step's


def test_an_older_fingerprint_is_other_work(work):
    assert "older cpuddp" in fingerprint.change("0123abcd", parts(work))


def state() -> dict:
    return {"model": {"w": torch.arange(10, dtype=torch.float32)}, "optimizer": {}, "scheduler": {},
            "rng": [checkpoint.rng_state()]}


def test_other_work_is_one_line_and_moved_aside_so_a_fresh_start_is_never_pruned(tmp_path, work, caplog):
    """Moved to the run's superseded/<what changed>-<time>/, never deleted (DESIGN.md)."""
    caplog.set_level(logging.INFO)
    run = tmp_path / "results" / "exp" / "default"
    root, old = run / "checkpoints", parts(work)
    for step in (20, 40):
        checkpoint.save(root, step, state(), {"fingerprint": old, "step": step}, keep=2)
    digests = {step: checkpoint.info(root / f"step-{step:08d}")["files"] for step in (20, 40)}
    data, _ = work
    (data / "train" / "data-00000-of-00001.arrow").write_bytes(b"fixed train tokens")
    log = logging.getLogger("test-fingerprint")
    assert checkpoint.newest(root, parts(work), log, set_aside=True) is None
    assert checkpoint.valid(root) == []
    [kept] = (run / "superseded").iterdir()
    assert re.fullmatch(r"data-\d{8}T\d{6}Z", kept.name), kept.name  # named by what changed
    for step in (20, 40):  # whole, as they were
        moved = kept / f"step-{step:08d}"
        assert checkpoint.damage(moved, checkpoint.info(moved)) is None
        assert checkpoint.info(moved)["files"] == digests[step]
    assert superseded.listed(run) == [str(kept / "step-00000020"), str(kept / "step-00000040")]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["checkpoint step-00000040 was trained on other data (train tokens digest differs): "
                     f"starting fresh; it with 1 more of that work is kept in {kept} "
                     f"(`rm -rf {run / 'superseded'}` deletes what the run keeps aside)"]
    checkpoint.save(root, 20, state(), {"fingerprint": parts(work), "step": 20}, keep=2)
    assert checkpoint.newest(root, parts(work), log)[0].name == "step-00000020"


def test_each_part_that_changed_names_its_folder(tmp_path, work):
    run = tmp_path / "run"
    checkpoint.save(run / "checkpoints", 10, state(), {"fingerprint": parts(work, learning_rate=3e-5), "step": 10},
                    keep=3)
    checkpoint.save(run / "checkpoints", 20, state(), {"fingerprint": parts(work, code="transformers"), "step": 20},
                    keep=3)
    checkpoint.newest(run / "checkpoints", parts(work), set_aside=True)
    assert sorted(Path(p).parent.name.split("-")[0] for p in superseded.listed(run)) == ["settings", "step"]
    assert fingerprint.changed_part(parts(work), parts(work)) is None
    assert fingerprint.changed_part("0123abcd", parts(work)) == "settings"  # an older cpuddp's


def test_temporary_folders_are_per_process_and_dead_ones_are_cleaned(tmp_path):
    host = socket.gethostname()
    gone = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process has it
    dead = tmp_path / f".step-00000040.{host}.{gone}.tmp"
    mine = tmp_path / f".step-00000060.{host}.{os.getpid()}.tmp"
    elsewhere = tmp_path / ".step-00000060.other-host.example.7.tmp"
    older = tmp_path / ".step-00000020.tmp"  # an older cpuddp's fixed name
    for folder in (dead, mine, elsewhere, older):
        folder.mkdir()
    assert sorted(checkpoint.clean_stale(tmp_path)) == sorted([dead, older])
    assert mine.is_dir() and elsewhere.is_dir()  # another host's: only once untouched for an hour
    os.utime(elsewhere, (0, 0))
    assert checkpoint.clean_stale(tmp_path) == [elsewhere]
    written = checkpoint.save(tmp_path, 80, state(), {"fingerprint": "x"}, keep=5)
    assert written.name == "step-00000080" and not list(tmp_path.glob(".step-00000080*"))
