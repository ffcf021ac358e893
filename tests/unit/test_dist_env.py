"""Rank and world size from every launcher's environment variables."""

import pytest

from workflow.scripts.launch.ranks import DistEnv, read


def test_intel_mpi_and_mpich():
    env = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    assert read(env) == DistEnv(rank=3, world_size=4, local_rank=1, local_world_size=2, launcher="pmi")
    assert not read(env).is_main


def test_open_mpi():
    env = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}
    assert read(env) == DistEnv(5, 8, 1, 4, "openmpi")


def test_torchrun():
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    got = read(env)
    assert got == DistEnv(0, 2, 0, 2, "torchrun")
    assert got.is_main


@pytest.mark.parametrize("per_node", ["2(x3)", "2"])
def test_slurm(per_node):
    env = {"SLURM_PROCID": "4", "SLURM_NTASKS": "6", "SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": per_node}
    assert read(env) == DistEnv(4, 6, 0, 2, "slurm")


def test_no_launcher_is_a_single_process():
    got = read({"HOME": "/root", "PATH": "/bin"})
    assert got == DistEnv(0, 1, 0, 1, "none")
    assert got.is_main


def test_mpi_inside_slurm_uses_the_mpi_ranks():
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0",
           "PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    assert read(env) == DistEnv(1, 2, 1, 2, "pmi")


def test_missing_local_variables_default_to_one_node():
    assert read({"PMI_RANK": "1", "PMI_SIZE": "3"}) == DistEnv(1, 3, 0, 3, "pmi")


def test_rank_without_size_is_not_a_launcher():
    assert read({"RANK": "2"}).launcher == "none"


def test_reads_os_environ_by_default(monkeypatch):
    for name in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setenv("MPI_LOCALRANKID", "1")
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")
    assert read() == DistEnv(1, 2, 1, 2, "pmi")
