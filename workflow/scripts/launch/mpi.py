"""Which MPI launches the ranks: Intel MPI, MPICH or Open MPI (or Slurm's srun).

The flavour comes from `mpirun --version` (or distributed.mpi / mpirun);
their command-line flags differ, so command.py builds each flavour's own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from workflow.scripts.common.errors import UserError
from workflow.scripts.settings.views import DistributedSettings

FLAVOURS = ("intel", "mpich", "openmpi")
# Debian installs each MPI's launcher under its own name besides `mpirun`.
FLAVOUR_NAMES = {"intel": ("mpirun",), "mpich": ("mpirun", "mpirun.mpich"),
                 "openmpi": ("mpirun", "mpirun.openmpi")}
USER_PATH = "CPUDDP_USER_PATH"  # PATH as the user started Snakemake (smk_env.py)


def _version_text(mpirun: str) -> str:
    try:
        done = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UserError(f"cannot run '{mpirun} --version' ({err}); "
                        "install an MPI (make venv installs Intel MPI)") from None
    return done.stdout + done.stderr


def parse_mpi_version(text: str) -> dict:
    """Flavour and version from `mpirun --version` output."""
    patterns = (
        ("intel", r"Intel\(R\) MPI Library.*?Version (\S+)"),
        ("openmpi", r"\((?:Open MPI|OpenRTE)\) (\S+)"),
        ("mpich", r"HYDRA build details:.*?Version:\s+(\S+)"),
    )
    for flavour, pattern in patterns:
        match = re.search(pattern, text, re.S)
        if match:
            return {"flavour": flavour, "version": match.group(1)}
    raise UserError("cannot tell which MPI `mpirun` is (not Intel MPI, MPICH or Open MPI); "
                    "put Intel MPI, MPICH or Open MPI's mpirun first on PATH, or set distributed.mpirun")


def search_path() -> list[str]:
    """Where mpirun is looked for: the user's PATH first, then this venv's bin."""
    user = os.environ.get(USER_PATH) or os.environ.get("PATH", "")
    dirs = [d for d in user.split(os.pathsep) if d]
    venv = os.path.dirname(sys.executable)
    return dirs + ([venv] if venv not in dirs else [])


def mpirun_candidates(requested: str) -> list[str]:
    names = ("mpirun",) if requested == "auto" else FLAVOUR_NAMES[requested]
    found = []
    for folder in search_path():
        for name in names:
            path = os.path.join(folder, name)
            if os.access(path, os.X_OK) and os.path.isfile(path):
                real = os.path.realpath(path)  # MPICH finds its proxy next to the real file
                if real not in found:
                    found.append(real)
    return found


def describe_mpirun(path: str) -> dict:
    return {"mpirun": os.path.realpath(path), **parse_mpi_version(_version_text(path))}


def detect_mpi(requested: str = "auto", mpirun: str | None = None) -> dict:
    """The mpirun to use: path (symlinks resolved), flavour and version.

    `mpirun` (distributed.mpirun) names one explicitly; otherwise `auto` takes
    the first `mpirun` on the user's PATH (then the venv's Intel MPI), and a
    named flavour the first mpirun of that flavour (mpirun, mpirun.<flavour>).
    """
    if mpirun:
        path = shutil.which(mpirun)
        if path is None:
            raise UserError(f"distributed.mpirun: {mpirun} not found or not executable")
        found = describe_mpirun(path)
        if requested not in ("auto", found["flavour"]):
            raise UserError(f"distributed.mpi is {requested} but distributed.mpirun {mpirun} is "
                            f"{found['flavour']} {found['version']}; fix one of them (or set distributed.mpi: auto)")
        return found
    candidates = mpirun_candidates(requested)
    if not candidates:
        if requested == "auto":
            raise UserError("mpirun not found on PATH; run `make venv` (Intel MPI) or install MPICH / Open MPI")
        raise UserError(f"distributed.mpi is {requested} but no {requested} mpirun was found on PATH "
                        f"({', '.join(FLAVOUR_NAMES[requested])}); install it, put it on PATH, "
                        "set distributed.mpirun, or set distributed.mpi: auto")
    seen = []
    for path in candidates:
        found = describe_mpirun(path)
        if requested in ("auto", found["flavour"]):
            return found
        seen.append(f"{path} is {found['flavour']} {found['version']}")
    raise UserError(f"distributed.mpi is {requested} but {'; '.join(seen)}; put the right mpirun first on PATH, "
                    "set distributed.mpirun or set distributed.mpi: auto")


def detect_launcher(dist: DistributedSettings) -> dict:
    """What starts the ranks: the mpirun of detect_mpi, or Slurm's srun."""
    if dist.launcher != "srun":
        return detect_mpi(dist.mpi, dist.mpirun)
    srun = shutil.which("srun")
    if srun is None:
        raise UserError("distributed.launcher is srun but srun is not on PATH; run inside Slurm "
                        "(snakemake --profile profiles/slurm) or set distributed.launcher: mpirun")
    text = subprocess.run([srun, "--version"], capture_output=True, text=True, timeout=30).stdout.split()
    return {"mpirun": srun, "flavour": "slurm", "version": text[-1] if text else "unknown"}
