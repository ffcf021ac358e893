"""oneCCL's leftover shared-memory regions (train/ccl_shm.py): a rank removes
its own as it leaves; a new ccl rank removes those whose process is gone;
a live process's, and files of other names, stay."""

from __future__ import annotations

import os

from workflow.scripts.train import ccl_shm

GONE = 4194305  # above the kernel's highest pid_max: never a live process


def test_regions_of_gone_processes_are_removed_live_ones_stay(tmp_path):
    names = [f"{GONE}:0:0", f"{GONE}:1:0", f"{os.getpid()}:0:0", "1:0:0", "notes", f"{GONE}:0", "cpuddp-allreduce-1-ab"]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    removed = ccl_shm.remove(tmp_path)
    assert sorted(p.name for p in removed) == [f"{GONE}:0:0", f"{GONE}:1:0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])


def test_a_rank_removes_only_its_own_as_it_leaves(tmp_path):
    for name in (f"{os.getpid()}:0:0", f"{GONE}:0:0", "1:0:0"):
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in ccl_shm.remove(tmp_path, own=True)] == [f"{os.getpid()}:0:0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{GONE}:0:0", "1:0:0"])


def test_no_folder_no_error(tmp_path):
    assert ccl_shm.remove(tmp_path / "absent") == []
