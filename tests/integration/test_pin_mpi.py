"""pin under a real Intel MPI mpirun: with its pinning domains each rank
keeps the core Intel MPI gave it and rank 0 says so; without them, pin binds
the ranks itself; more threads than cores leaves them alone with a warning."""

from __future__ import annotations

import os
import sys

import subprocess

from helpers.workflow import BIN, REPO

SHOW = "import os; os.write(1, f'affinity {sorted(os.sched_getaffinity(0))}\\n'.encode())"


def run(threads: int, **env) -> subprocess.CompletedProcess:
    argv = [str(BIN / "mpirun"), "-n", "2", sys.executable, "-m", "workflow.scripts.launch.pin", "--threads",
            str(threads), "--", sys.executable, "-c", SHOW]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO), **env})


def affinities(done) -> list[str]:
    return sorted(line for line in done.stdout.splitlines() if line.startswith("affinity"))


def test_intel_mpi_pinning_is_kept_and_reported():
    if len(os.sched_getaffinity(0)) < 2:
        raise AssertionError("this test needs 2 cores")
    done = run(1, I_MPI_PIN_DOMAIN="omp")
    assert done.returncode == 0, done.stderr
    assert affinities(done) == ["affinity [0]", "affinity [1]"]
    assert "pin: already pinned by the MPI library: cores 0; kept" in done.stderr
    assert "not pinned" not in done.stderr


def test_without_mpi_pinning_pin_binds_and_oversubscription_warns():
    done = run(1, I_MPI_PIN="0")
    assert affinities(done) == ["affinity [0]", "affinity [1]"] and "pin:" not in done.stderr
    cores = len(os.sched_getaffinity(0))
    done = run(cores, I_MPI_PIN="0")
    assert f"pin: not pinned: 2 ranks x {cores} threads exceed this node's {cores} cores" in done.stderr
