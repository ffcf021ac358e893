"""Make targets never pass by skipping: a missing prerequisite stops them at
once with one line that names the fix."""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers.workflow import REPO


def make(*args: str, user: str | None = None) -> subprocess.CompletedProcess:
    argv = ["make", "--no-print-directory", "-C", str(REPO), *args]
    if user:  # drop root for this one command
        argv = ["setpriv", f"--reuid={user}", "--regid=65534", "--clear-groups", *argv]
    # A fresh top-level make, as a user types it: under `make test` the
    # inherited MAKELEVEL would turn make's own "make:" into "make[2]:".
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0, done.stdout
    lines = [line for line in done.stderr.splitlines() if not line.startswith("make: ***")]
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_missing_packages_name_them_and_the_fix():
    line = one_error_line(make("test-slurm", "CI_DEBS=make no-such-package-cpuddp"))
    assert "missing Debian packages no-such-package-cpuddp" in line and "make ci-deps" in line
    assert "make" not in line.split("packages")[1].split(";")[0]  # installed ones are not listed


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping root needs root; as a user need-root is what runs")
@pytest.mark.parametrize("target", ["test-multinode", "test-slurm", "test-scaling", "test-integration"])
def test_targets_that_need_root_say_so(target):
    line = one_error_line(make(target, "CI_DEBS=", user="nobody"))
    assert line.startswith(f"make {target}: needs root") and "run it as root" in line


def test_the_intel_env_needs_its_python():
    line = one_error_line(make("test-intel", "INTEL_PY=python3.99-missing"))
    assert "python3.99-missing not found" in line and "make intel-venv" in line
