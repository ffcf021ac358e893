"""Snakemake resources of the rules that launch ranks (profiles/xeon caps
`mpi`; profiles/slurm sizes the allocation from the rest)."""

from __future__ import annotations

def per_node_job(dist: dict) -> bool:
    """Whether the environment check launches one rank per node (else it
    runs right here: this machine is the only node)."""
    return dist["nodes"] > 1 or bool(dist.get("hostfile"))


def mpi_job(dist: dict) -> bool:
    """Whether training holds the `mpi` resource: always with mpirun; under
    Slurm only with several ranks (the executor then sizes the job with tasks
    or tasks_per_node; one rank is a one-task job, and the launcher still
    starts it with srun, so that Slurm binds it)."""
    return dist.get("launcher") != "srun" or dist["nodes"] * dist["processes_per_node"] > 1


def slurm_tasks(dist: dict, ranks_per_node: int | None = None) -> dict:
    """Slurm executor resources: `tasks_per_node` or `tasks`, never both, and
    only for jobs of more than one task (None leaves a resource unset)."""
    per_node = dist["processes_per_node"] if ranks_per_node is None else ranks_per_node
    if per_node > 1:
        return {"tasks_per_node": per_node, "tasks": None}
    return {"tasks_per_node": None, "tasks": dist["nodes"] if dist["nodes"] > 1 else None}


def slurm_cpus(dist: dict) -> int | None:
    """Cores per rank; `auto` / `tuned` leave it to Slurm (give Slurm runs a number)."""
    threads = dist["threads_per_process"]
    return threads if isinstance(threads, int) else None
