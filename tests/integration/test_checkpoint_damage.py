"""Damaged state is never trusted: a truncated or corrupted checkpoint, a
missing marker or other settings are passed over with a log line naming
them; a full disk ends in one line naming the path and the space, and the
previous checkpoint stays whole (a real small tmpfs)."""

from __future__ import annotations

import logging
import subprocess

import pytest
import torch

from workflow.scripts.common.errors import UserError
from workflow.scripts.train import checkpoint

FP = "abc"


def state(size: int = 1000) -> dict:
    return {"model": {"w": torch.arange(size, dtype=torch.float32)}, "optimizer": {"x": 1}, "scheduler": {},
            "rng": [checkpoint.rng_state()]}


def save(root, step: int, fingerprint: str = FP, size: int = 1000):
    return checkpoint.save(root, step, state(size), {"fingerprint": fingerprint, "epoch": 0}, keep=5)


@pytest.fixture
def log(caplog):
    caplog.set_level(logging.WARNING)
    return logging.getLogger("test-checkpoint")


@pytest.mark.parametrize("damage, reason", [
    (lambda f: (f / "model.pt").write_bytes((f / "model.pt").read_bytes()[:100]), "model.pt is damaged"),
    (lambda f: (f / "state.pt").unlink(), "state.pt is missing"),
    (lambda f: (f / checkpoint.MARKER).write_text("{not json"), "its marker is unreadable"),
])
def test_a_damaged_newest_checkpoint_is_passed_over_with_its_name(tmp_path, log, caplog, damage, reason):
    save(tmp_path, 20)
    newest = save(tmp_path, 40)
    damage(newest)
    folder, loaded = checkpoint.newest(tmp_path, FP, log)
    assert folder.name == "step-00000020" and loaded["meta"]["step"] == 20
    assert torch.equal(loaded["model"]["w"], state()["model"]["w"])
    assert f"skipping checkpoint {newest}: {reason}" in caplog.text


def test_a_missing_marker_is_no_checkpoint_and_other_settings_are_named(tmp_path, log, caplog):
    save(tmp_path, 20)
    (save(tmp_path, 40) / checkpoint.MARKER).unlink()
    save(tmp_path, 60, fingerprint="other")
    folder, _ = checkpoint.newest(tmp_path, FP, log)
    assert folder.name == "step-00000020"
    assert "checkpoint step-00000060 was trained with other training settings" in caplog.text
    assert "resuming from step-00000020 instead" in caplog.text
    assert "step-00000040" not in caplog.text  # without its marker it was never a checkpoint


def test_nothing_whole_means_a_fresh_start(tmp_path, log):
    (save(tmp_path, 20) / "model.pt").write_bytes(b"garbage")
    assert checkpoint.newest(tmp_path, FP, log) is None


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MB tmpfs (mounting it needs root: the test is marked `cluster`)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    yield mount
    # lazy: a failed torch.save may hold its file open until collected
    done = subprocess.run(["umount", "--lazy", str(mount)], capture_output=True, text=True)
    assert done.returncode == 0, f"umount {mount}: {done.stderr}"


@pytest.mark.cluster
def test_a_full_disk_names_the_path_and_space_and_keeps_the_previous_checkpoint(small_disk, log):
    previous = save(small_disk, 20, size=50_000)  # 200 kB: fits
    with pytest.raises(UserError) as full:
        save(small_disk, 40, size=400_000)  # 1.6 MB: does not
    message = str(full.value)
    assert message.startswith(f"no space left on the device writing {small_disk / 'step-00000040'}: ")
    assert "it needs about 1.6 MB" in message and "MB are free" in message and "\n" not in message
    assert not (small_disk / "step-00000040").exists() and not list(small_disk.glob(".step-*"))
    folder, _ = checkpoint.newest(small_disk, FP, log)
    assert folder == previous
