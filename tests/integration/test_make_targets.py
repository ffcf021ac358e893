"""Make targets never pass by skipping: a missing prerequisite stops them at
once with one line that names the fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers.workflow import REPO


# What make reads before it runs a target: the Makefile, its parts, and the
# files its hashes name.
MAKE_FILES = ("Makefile", "mk", "envs", "requirements.lock", "requirements.txt", "tests/reference/requirements.txt")


def readable_copy() -> Path:
    """The make files in a folder any user can read: a clone may sit under a
    0700 folder (/root/x), which `nobody` cannot enter."""
    folder = Path(tempfile.mkdtemp(prefix="cpuddp-make-"))
    folder.chmod(0o755)
    for name in MAKE_FILES:
        source, target = REPO / name, folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    return folder


def make(*args: str, user: str | None = None) -> subprocess.CompletedProcess:
    where = readable_copy() if user else REPO
    argv = ["make", "--no-print-directory", "-C", str(where), *args]
    if user:  # drop root for this one command
        argv = ["setpriv", f"--reuid={user}", "--regid=65534", "--clear-groups", *argv]
    # A fresh top-level make, as a user types it: under `make test` the
    # inherited MAKELEVEL would turn make's own "make:" into "make[2]:".
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    finally:
        if user:
            shutil.rmtree(where, ignore_errors=True)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0, done.stdout
    lines = [line for line in done.stderr.splitlines() if not line.startswith("make: ***")]
    assert len(lines) == 1, done.stderr
    return lines[0]


# A user meets the package check as root: every target that needs Debian's
# packages checks for root first (as non-root, `make test` found this).
@pytest.mark.cluster
def test_missing_packages_name_them_and_the_fix():
    line = one_error_line(make("test-slurm", "CI_DEBS=make no-such-package-cpuddp"))
    assert "missing Debian packages no-such-package-cpuddp" in line and "make ci-deps" in line
    assert "make" not in line.split("packages")[1].split(";")[0]  # installed ones are not listed


@pytest.mark.cluster  # dropping root needs root
@pytest.mark.parametrize("target", ["test-multinode", "test-slurm", "test-scaling", "test-cluster", "test-all"])
def test_targets_that_need_root_say_so(target):
    line = one_error_line(make(target, "CI_DEBS=", user="nobody"))
    assert line.startswith(f"make {target}: needs root") and "run it as root" in line


def test_the_intel_env_needs_its_python():
    line = one_error_line(make("test-intel", "INTEL_PY=python3.99-missing"))
    assert "python3.99-missing not found" in line and "make intel-venv" in line
