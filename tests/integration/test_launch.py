"""mpirun flavours, hostfiles, argument lists and a real two-rank launch."""

import os
import sys
from pathlib import Path

import pytest

from workflow.scripts.settings.hostfile import read_hostfile
from workflow.scripts.launch import command as launch
from workflow.scripts.launch import mpi
from workflow.scripts.common.errors import UserError

BIN = Path(sys.executable).parent
INTEL = "Intel(R) MPI Library for Linux* OS, Version 2021.17 Build 20251215 (id: 2ac2f63)\n" \
        "Copyright 2003-2025, Intel Corporation.\n"
MPICH = ("HYDRA build details:\n"
         "    Version:                                 4.1.2\n"
         "    Release Date:                            Wed Jun  7 15:22:45 CDT 2023\n"
         "    CC:                              gcc\n"
         "    Launchers available:                     ssh rsh fork slurm ll lsf sge manual persist\n")
OPENMPI = "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"


# ---------------------------------------------------------------- flavours

@pytest.mark.parametrize("text, flavour, version", [
    (INTEL, "intel", "2021.17"),
    (MPICH, "mpich", "4.1.2"),
    (OPENMPI, "openmpi", "4.1.4"),
    ("mpirun (Open MPI) 5.0.3\n", "openmpi", "5.0.3"),
    ("mpirun.openmpi (OpenRTE) 4.1.4\n", "openmpi", "4.1.4"),
])
def test_parse_mpi_version(text, flavour, version):
    assert mpi.parse_mpi_version(text) == {"flavour": flavour, "version": version}


@pytest.mark.parametrize("text", ["", "mpirun: command not found", "Spectrum MPI 10.4"])
def test_parse_unknown_mpi(text):
    with pytest.raises(UserError, match="first on PATH"):
        mpi.parse_mpi_version(text)


def test_detect_installed_intel_mpi(mpi_path):
    found = mpi.detect_mpi()
    assert found["flavour"] == "intel"
    assert found["version"].startswith("2021.")
    assert found["mpirun"] == os.path.realpath(BIN / "mpirun")  # .venv may be a link (VENV_CACHE)
    assert mpi.detect_mpi("intel") == found


def test_detect_mismatch_with_explicit_mpirun(mpi_path):
    with pytest.raises(UserError) as err:
        mpi.detect_mpi("openmpi", mpirun=str(BIN / "mpirun"))
    message = str(err.value)
    assert "openmpi" in message and "intel" in message and "distributed.mpi" in message


def test_detect_flavour_not_installed(monkeypatch):
    """Only the venv's Intel MPI in reach: asking for MPICH says what was found."""
    monkeypatch.setenv("PATH", str(BIN))
    monkeypatch.delenv(mpi.USER_PATH, raising=False)
    with pytest.raises(UserError) as err:
        mpi.detect_mpi("mpich")
    assert "distributed.mpi is mpich" in str(err.value) and "intel" in str(err.value)


def fake_mpirun(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n/bin/cat <<'EOF'\n{text}EOF\n")
    path.chmod(0o755)
    return path


def test_auto_takes_the_users_path_before_the_venv(monkeypatch, tmp_path):
    """Snakemake puts the venv first on PATH; the user's own PATH decides."""
    fake_mpirun(tmp_path / "ompi", "mpirun", OPENMPI)
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{tmp_path / 'ompi'}")
    monkeypatch.setenv(mpi.USER_PATH, str(tmp_path / "ompi"))
    found = mpi.detect_mpi()
    assert found["flavour"] == "openmpi" and found["mpirun"] == str(tmp_path / "ompi" / "mpirun")
    assert mpi.detect_mpi("intel")["mpirun"] == os.path.realpath(BIN / "mpirun")  # then the venv


def test_named_flavour_finds_debian_names(monkeypatch, tmp_path):
    fake_mpirun(tmp_path / "bin", "mpirun", INTEL)
    fake_mpirun(tmp_path / "bin", "mpirun.mpich", MPICH)
    link = tmp_path / "link"
    link.mkdir()
    (link / "mpirun.mpich").symlink_to(tmp_path / "bin" / "mpirun.mpich")
    monkeypatch.setenv(mpi.USER_PATH, f"{link}{os.pathsep}{tmp_path / 'bin'}")
    found = mpi.detect_mpi("mpich")
    # the real file, so that MPICH finds hydra_pmi_proxy next to it
    assert found == {"mpirun": str(tmp_path / "bin" / "mpirun.mpich"), "flavour": "mpich", "version": "4.1.2"}


def test_explicit_mpirun_missing():
    with pytest.raises(UserError, match="distributed.mpirun: /no/such/mpirun not found"):
        mpi.detect_mpi("auto", mpirun="/no/such/mpirun")


def test_detect_without_mpirun(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(mpi.USER_PATH, str(tmp_path))
    monkeypatch.setattr(launch.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(UserError, match="mpirun not found"):
        mpi.detect_mpi()


# ---------------------------------------------------------------- hostfiles

def test_read_hostfile_forms(tmp_path):
    path = tmp_path / "hostfile"
    path.write_text("# cluster\n\nnode1\nnode2:4   # four slots\n  node3 slots=4\n\n#node4\n")
    assert read_hostfile(path) == ["node1", "node2", "node3"]


def test_read_hostfile_missing(tmp_path):
    with pytest.raises(UserError, match="hostfile not found.*distributed.hostfile"):
        read_hostfile(tmp_path / "nope")


@pytest.mark.parametrize("text", ["", "\n# only a comment\n   \n"])
def test_read_hostfile_empty(tmp_path, text):
    path = tmp_path / "hostfile"
    path.write_text(text)
    with pytest.raises(UserError, match="lists no nodes"):
        read_hostfile(path)


# ---------------------------------------------------------------- argv

EVIL = "a;touch /tmp/x"


@pytest.mark.parametrize("flavour", ["intel", "mpich"])
def test_mpirun_argv_hydra(flavour):
    argv = launch.mpirun_argv(flavour, "/x/mpirun", 4, 2, {"A": "1", "B": EVIL}, ["python", "-m", "step"],
                              hostfile="hosts")
    assert argv == ["/x/mpirun", "-n", "4", "-ppn", "2", "-f", "hosts",
                    "-genv", "A", "1", "-genv", "B", EVIL, "python", "-m", "step"]


def test_mpirun_argv_hydra_without_hostfile():
    argv = launch.mpirun_argv("intel", "mpirun", 2, 2, {}, ["prog"])
    assert argv == ["mpirun", "-n", "2", "-ppn", "2", "prog"]


def test_mpirun_argv_openmpi():
    argv = launch.mpirun_argv("openmpi", "/x/mpirun", 4, 2, {"A": 1, "B": EVIL}, ["python", "step.py"],
                              hostfile="hosts")
    assert argv[:3] == ["/x/mpirun", "-n", "4"]
    assert argv[argv.index("--map-by") + 1] == "ppr:2:node"
    assert argv[argv.index("--hostfile") + 1] == "hosts"
    assert "-f" not in argv and "-ppn" not in argv and "-genv" not in argv
    exported = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    assert exported == ["A=1", f"B={EVIL}"]
    assert argv[-2:] == ["python", "step.py"]
    assert ("--allow-run-as-root" in argv) == (os.geteuid() == 0)
