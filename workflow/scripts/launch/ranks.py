"""Rank, world size and local rank, read in one place from any launcher.

Intel MPI / MPICH (PMI_*, MPI_LOCALRANKID), Open MPI (OMPI_COMM_WORLD_*),
Slurm (SLURM_*) and torchrun (RANK, WORLD_SIZE, LOCAL_RANK).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# (rank, world size, local rank, local world size) variables per launcher,
# most specific first: Slurm sets SLURM_* even around an mpirun inside it.
LAUNCHERS = (
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    # SLURM_NTASKS_PER_NODE exists only with --ntasks-per-node; SLURM_TASKS_PER_NODE always.
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_TASKS_PER_NODE"),
)


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    launcher: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def read(env: dict | None = None) -> DistEnv:
    """The process's place in the job; a single process when no launcher."""
    env = os.environ if env is None else env
    for name, rank, size, local, local_size in LAUNCHERS:
        if rank in env and size in env:
            world = int(env[size])
            local_world = _local_size(env.get(local_size), world)
            return DistEnv(int(env[rank]), world, int(env.get(local, 0)), local_world, name)
    return DistEnv(0, 1, 0, 1, "none")


def _local_size(value: str | None, world: int) -> int:
    # SLURM_TASKS_PER_NODE may read "2(x3)" on heterogeneous allocations.
    if not value:
        return world
    return int(value.split("(")[0])
