"""Outputs follow the user's umask (DESIGN.md): the sweep run, made under
umask 0022, leaves every folder and file of results/ and logs/ as a plain
mkdir and open would, so a team shares the results folder and a serving
account loads the deployed model."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

from helpers.sweep import EXPERIMENT, RUNS, SHARED_UMASK

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def modes_not_following_the_umask(root: Path) -> list[str]:
    """Every folder or file under `root` whose mode differs from a plain mkdir's or open's."""
    wrong = []
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        if stat.S_ISDIR(info.st_mode):
            expected = 0o777 & ~SHARED_UMASK
        elif stat.S_ISREG(info.st_mode):
            expected = (0o777 if info.st_mode & 0o111 else 0o666) & ~SHARED_UMASK
        else:
            continue  # a link: its mode means nothing
        if stat.S_IMODE(info.st_mode) != expected:
            wrong.append(f"{path.relative_to(root)} {stat.S_IMODE(info.st_mode):o}")
    return wrong


@pytest.mark.parametrize("folder", [f"results/{EXPERIMENT}", "logs"])
def test_results_and_logs_have_the_modes_of_a_plain_mkdir_and_open(sweep_run, folder):
    root = sweep_run[0] / folder
    assert (root / RUNS[0] / "deploy").is_dir() or folder == "logs"
    assert modes_not_following_the_umask(root) == []


@contextlib.contextmanager
def reachable_by_others(path: Path):
    """The folders above `path` searchable by others while the block runs
    (pytest's base folder is 0700), as a team's shared folder is."""
    changed = []
    for parent in reversed(path.parents):
        mode = stat.S_IMODE(parent.stat().st_mode)
        if not mode & stat.S_IXOTH:
            os.chmod(parent, mode | stat.S_IXOTH)
            changed.append((parent, mode))
    try:
        yield
    finally:
        for parent, mode in changed:
            os.chmod(parent, mode)


@pytest.mark.cluster  # root: reads as user nobody (setpriv)
def test_another_user_lists_and_reads_the_model_and_the_deployment(sweep_run):
    work = sweep_run[0]
    run = work / f"results/{EXPERIMENT}/{RUNS[-1]}"
    with reachable_by_others(run):
        for command in (["ls", str(run / "model"), str(run / "deploy"), str(work / "logs")],
                        ["cat", str(run / "model/model.safetensors"), str(run / "deploy/deploy.json")]):
            done = subprocess.run([*NOBODY, *command], capture_output=True, timeout=60)
            assert done.returncode == 0, done.stderr.decode()
    assert b'"candidate"' in done.stdout and len(done.stdout) > (run / "model/model.safetensors").stat().st_size
