"""The environment every job of the workflow inherits from Snakemake."""

from __future__ import annotations

import os
import sys


def prepare_job_environment(basedir: str) -> None:
    """Steps run as `python -m workflow.scripts.<step>` from any directory,
    with the `python` and `mpirun` of Snakemake's own environment (the .venv)
    even when it was not activated; `--sdm conda` puts its env first."""
    paths = [basedir, os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    # mpirun is looked for on the PATH as the user gave it, before the venv's
    # (launch.py), so that `mpi: auto` takes the MPI the user put first.
    os.environ.setdefault("CPUDDP_USER_PATH", os.environ["PATH"])
    os.environ["PATH"] = os.pathsep.join((os.path.dirname(sys.executable), os.environ["PATH"]))
