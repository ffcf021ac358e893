"""The shared-memory all-reduce's file on a shared node: created 0600 and
only under a new name; files left by a killed creator are removed, other
users' and live creators' never (train/node_allreduce.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from workflow.scripts.train import node_allreduce as shm


def test_the_file_is_new_zero_filled_and_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        shm.create_file(tmp_path / "f", 4096)
    finally:
        os.umask(old)
    info = (tmp_path / "f").stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_size == 4096
    assert (tmp_path / "f").read_bytes() == bytes(4096)


def test_an_existing_name_is_never_opened(tmp_path):
    placed = tmp_path / "placed"
    placed.write_text("someone else's")
    with pytest.raises(FileExistsError):
        shm.create_file(placed, 4096)
    assert placed.read_text() == "someone else's"
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(FileExistsError):
        shm.create_file(tmp_path / "link", 4096)
    assert not (tmp_path / "target").exists()


def dead_pid() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process can have it


def test_files_of_killed_creators_are_removed_only_those(tmp_path):
    dead = tmp_path / f"{shm.PREFIX}{dead_pid()}-ab12"
    alive = tmp_path / f"{shm.PREFIX}{os.getpid()}-cd34"
    other = tmp_path / "unrelated"
    for path in (dead, alive, other):
        path.write_bytes(b"")
    assert shm.remove_stale(tmp_path) == [dead]
    assert not dead.exists() and alive.exists() and other.exists()


def test_another_users_file_is_left_alone(tmp_path, monkeypatch):
    """Seen from another user: giving the file away (chown) would need root,
    and remove_stale tells the files apart by owner against its own uid."""
    theirs = tmp_path / f"{shm.PREFIX}{dead_pid()}-ef56"
    theirs.write_bytes(b"")
    monkeypatch.setattr(os, "geteuid", lambda: theirs.stat().st_uid + 1)
    assert shm.remove_stale(tmp_path) == [] and theirs.exists()
