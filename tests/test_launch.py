"""mpirun flavours, hostfiles, argument lists and a real two-rank launch."""

import json
import os
import sys
from pathlib import Path

import pytest

from workflow.scripts import config as cfg
from workflow.scripts import environment, launch
from workflow.scripts.errors import UserError

BIN = Path(sys.executable).parent
INTEL = "Intel(R) MPI Library for Linux* OS, Version 2021.17 Build 20251215 (id: 2ac2f63)\n" \
        "Copyright 2003-2025, Intel Corporation.\n"
MPICH = ("HYDRA build details:\n"
         "    Version:                                 4.1.2\n"
         "    Release Date:                            Wed Jun  7 15:22:45 CDT 2023\n"
         "    CC:                              gcc\n"
         "    Launchers available:                     ssh rsh fork slurm ll lsf sge manual persist\n")
OPENMPI = "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"


@pytest.fixture
def mpi_path(monkeypatch):
    """The Intel MPI installed in the venv, first on PATH."""
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")


# ---------------------------------------------------------------- flavours

@pytest.mark.parametrize("text, flavour, version", [
    (INTEL, "intel", "2021.17"),
    (MPICH, "mpich", "4.1.2"),
    (OPENMPI, "openmpi", "4.1.4"),
    ("mpirun (Open MPI) 5.0.3\n", "openmpi", "5.0.3"),
])
def test_parse_mpi_version(text, flavour, version):
    assert launch.parse_mpi_version(text) == {"flavour": flavour, "version": version}


@pytest.mark.parametrize("text", ["", "mpirun: command not found", "Spectrum MPI 10.4"])
def test_parse_unknown_mpi(text):
    with pytest.raises(UserError, match="first on PATH"):
        launch.parse_mpi_version(text)


def test_detect_installed_intel_mpi(mpi_path):
    found = launch.detect_mpi()
    assert found["flavour"] == "intel"
    assert found["version"].startswith("2021.")
    assert Path(found["mpirun"]) == BIN / "mpirun"
    assert launch.detect_mpi("intel") == found


def test_detect_mismatch(mpi_path):
    with pytest.raises(UserError) as err:
        launch.detect_mpi("openmpi")
    message = str(err.value)
    assert "openmpi" in message and "intel" in message and "distributed.mpi" in message


def test_detect_without_mpirun(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="mpirun not found"):
        launch.detect_mpi()


# ---------------------------------------------------------------- hostfiles

def test_read_hostfile_forms(tmp_path):
    path = tmp_path / "hostfile"
    path.write_text("# cluster\n\nnode1\nnode2:4   # four slots\n  node3 slots=4\n\n#node4\n")
    assert launch.read_hostfile(path) == ["node1", "node2", "node3"]


def test_read_hostfile_missing(tmp_path):
    with pytest.raises(UserError, match="hostfile not found.*distributed.hostfile"):
        launch.read_hostfile(tmp_path / "nope")


@pytest.mark.parametrize("text", ["", "\n# only a comment\n   \n"])
def test_read_hostfile_empty(tmp_path, text):
    path = tmp_path / "hostfile"
    path.write_text(text)
    with pytest.raises(UserError, match="lists no nodes"):
        launch.read_hostfile(path)


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


# ---------------------------------------------------------------- addresses and env

def test_master_addr():
    assert launch.master_addr(None) == "127.0.0.1"
    assert launch.master_addr(["localhost", "other"]) == "127.0.0.1"


def test_master_addr_unresolvable():
    with pytest.raises(UserError, match="no-such-node.invalid"):
        launch.master_addr(["no-such-node.invalid"])


def test_free_port_is_usable():
    port = launch.free_port()
    assert 0 < port < 65536


INFO = {"threads_per_process": 6, "mpi": {"flavour": "intel"}, "backend": "gloo"}


def test_rank_env():
    env = launch.rank_env(INFO, {}, "10.0.0.1", 29500)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "6"
    assert env["MASTER_ADDR"] == "10.0.0.1"
    assert env["MASTER_PORT"] == "29500"
    assert env["I_MPI_PIN_DOMAIN"] == "omp"
    assert "CCL_WORKER_COUNT" not in env
    assert all(isinstance(v, str) for v in env.values())


def test_rank_env_user_extras_override():
    env = launch.rank_env(INFO, {"OMP_NUM_THREADS": 1, "KMP_AFFINITY": "granularity=fine"}, "h", 1)
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["KMP_AFFINITY"] == "granularity=fine"


def test_rank_env_openmpi_ccl():
    env = launch.rank_env({**INFO, "mpi": {"flavour": "openmpi"}, "backend": "ccl"}, {}, "h", 1)
    assert "I_MPI_PIN_DOMAIN" not in env
    assert env["CCL_WORKER_COUNT"] == "1"


def test_build_with_hostfile(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost:2\nlocalhost\n")
    config = cfg.validate({"experiment": "x", "task": "mrpc", "model": "m",
                           "distributed": {"hostfile": str(hostfile), "nodes": 2, "processes_per_node": 3}})
    info = {**INFO, "mpi": {"flavour": "mpich", "mpirun": "/x/mpirun"}}
    argv = launch.build(config, info, ["prog"])
    assert argv[:7] == ["/x/mpirun", "-n", "6", "-ppn", "3", "-f", str(hostfile)]
    genv = {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "-genv"}
    assert genv["MASTER_ADDR"] == "127.0.0.1"
    assert genv["OMP_NUM_THREADS"] == "6"
    assert argv[-1] == "prog"


# ---------------------------------------------------------------- real runs

RANK_PROGRAM = (
    "import os, sys; from pathlib import Path; "
    "Path(sys.argv[1], 'rank' + os.environ['PMI_RANK']).write_text("
    "os.environ['OMP_NUM_THREADS'] + '|' + os.environ['EVIL'] + '|' + os.environ['PMI_SIZE'])"
)


@pytest.fixture
def run_files(tmp_path, mpi_path, monkeypatch):
    """A run's config JSON and environment.json, 2 ranks of 3 threads."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    evil = f"a b;touch {tmp_path}/pwned"
    config = cfg.validate({"experiment": "t", "task": "mrpc", "model": "m",
                           "train": {"precision": "fp32"},
                           "distributed": {"backend": "gloo", "processes_per_node": 2, "threads_per_process": 3,
                                           "env": {"EVIL": evil}}})
    info = environment.describe(config)
    config_path, env_path = tmp_path / "config.json", tmp_path / "environment.json"
    config_path.write_text(json.dumps(config))
    env_path.write_text(json.dumps(info))
    return ["--config", str(config_path), "--environment", str(env_path)], evil


def test_real_two_rank_launch(run_files, tmp_path):
    args, evil = run_files
    out = tmp_path / "ranks"
    out.mkdir()
    launch.main([*args, "--", sys.executable, "-c", RANK_PROGRAM, str(out)])
    assert sorted(p.name for p in out.iterdir()) == ["rank0", "rank1"]
    for rank in ("rank0", "rank1"):
        assert (out / rank).read_text() == f"3|{evil}|2"
    assert not (tmp_path / "pwned").exists()


def test_failing_rank_raises(run_files):
    args, _ = run_files
    with pytest.raises(UserError, match="exit code"):
        launch.main([*args, "--", sys.executable, "-c", "import sys; sys.exit(3)"])
