"""Superseded checkpoints are moved aside only when the fresh training can
still write its own: less free space than the newest takes stops the run
with one line, and nothing is moved or deleted."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from workflow.scripts.common import superseded
from workflow.scripts.common.errors import UserError
from workflow.scripts.train import checkpoint

FINGERPRINT = {"settings": {"lr": 1}, "data": {"train tokens digest": "a"}, "model": {}, "step": {}}
NOW = {**FINGERPRINT, "data": {"train tokens digest": "b"}}


def state() -> dict:
    return {"model": {"w": torch.zeros(4)}, "optimizer": {}, "scheduler": {}, "rng": [checkpoint.rng_state()]}


def test_less_free_space_than_a_checkpoint_takes_stops_and_moves_nothing(tmp_path):
    run = tmp_path / "run"
    for step in (10, 20):
        checkpoint.save(run / "checkpoints", step, state(), {"fingerprint": FINGERPRINT, "step": step}, keep=2)
    newest = run / "checkpoints" / "step-00000020"
    # A sparse file: the checkpoint counts as larger than the disk's free space, and takes none of it.
    os.truncate(newest / "model.pt", shutil.disk_usage(tmp_path).free + (1 << 30))
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    with pytest.raises(UserError) as error:
        checkpoint.newest(run / "checkpoints", NOW, set_aside=True)
    line = str(error.value)
    assert "\n" not in line and f"no space for a fresh training's checkpoints in {run / 'checkpoints'}" in line
    assert "nothing was moved or deleted" in line and f"rm -rf {run / 'superseded'}" in line
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # all where it was
    assert [p.name for p in checkpoint.valid(run / "checkpoints")] == ["step-00000010", "step-00000020"]


def test_with_room_both_are_moved_and_listed_in_order(tmp_path):
    run = tmp_path / "run"
    for step in (10, 20):
        checkpoint.save(run / "checkpoints", step, state(), {"fingerprint": FINGERPRINT, "step": step}, keep=2)
    assert checkpoint.newest(run / "checkpoints", NOW, set_aside=True) is None
    kept = superseded.listed(run)
    assert [os.path.basename(p) for p in kept] == ["step-00000010", "step-00000020"]
    assert all(os.path.basename(os.path.dirname(p)).startswith("data-") for p in kept)
    assert superseded.listed(tmp_path / "nothing") == []
