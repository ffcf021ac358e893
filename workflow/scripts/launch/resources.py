"""Snakemake resources of the rules that launch ranks (profiles/local caps
`mpi`; with a hostfile the `nodes` resource counts its nodes, which packed
runs share out (launch/lease.py says which); profiles/slurm sizes the
allocation from the rest)."""

from __future__ import annotations

from workflow.scripts.settings.views import DistributedSettings


def leasing(dist: DistributedSettings) -> bool:
    """Runs lease hostfile nodes (mpirun from a hostfile; Slurm places its own jobs)."""
    return dist.launcher != "srun" and bool(dist.hostfile)


def at_once(run_nodes: list[int], hostfile_nodes: int) -> int:
    """How many runs can train at the same time on disjoint nodes: the most
    that fit, smallest first (at least one: a run never waits for itself)."""
    total, count = 0, 0
    for nodes in sorted(run_nodes):
        if total + nodes > hostfile_nodes:
            break
        total, count = total + nodes, count + 1
    return max(count, 1)


def packing(dist: DistributedSettings, run_nodes: list[int], hostfile_nodes: int | None) -> str:
    """The dry run's line: how many runs, and how many can run at once."""
    runs = f"{len(run_nodes)} runs"
    if dist.launcher == "srun":
        return f"{runs}, each its own Slurm job (Slurm packs them onto the partition's nodes)"
    if not leasing(dist):
        return f"{runs}, one at a time (every rank on this machine)"
    n = at_once(run_nodes, hostfile_nodes)
    return (f"{runs}; up to {n} at once on disjoint nodes of the hostfile's {hostfile_nodes} "
            f"(runs take {'/'.join(map(str, sorted(set(run_nodes))))} nodes each; -j caps it too)")

def per_node_job(dist: DistributedSettings) -> bool:
    """Whether the environment check launches one rank per node (else it
    runs right here: this machine is the only node)."""
    return dist.nodes > 1 or bool(dist.hostfile)


def check_holds_mpi(dist: DistributedSettings) -> bool:
    """The environment check holds `mpi` when it launches, except when it
    leases its nodes (then it holds `nodes`, as training does)."""
    return per_node_job(dist) and not leasing(dist)


def mpi_job(dist: DistributedSettings) -> bool:
    """Whether training holds the `mpi` resource: with mpirun on this machine
    (with a hostfile it holds `nodes` instead, so that runs pack); under
    Slurm only with several ranks (the executor then sizes the job with tasks
    or tasks_per_node; one rank is a one-task job, and the launcher still
    starts it with srun, so that Slurm binds it)."""
    if leasing(dist):
        return False
    return dist.launcher != "srun" or dist.nodes * dist.processes_per_node > 1


def slurm_tasks(dist: DistributedSettings, ranks_per_node: int | None = None) -> dict:
    """Slurm executor resources: `tasks_per_node` or `tasks`, never both, and
    only for jobs of more than one task (None leaves a resource unset)."""
    per_node = dist.processes_per_node if ranks_per_node is None else ranks_per_node
    if not isinstance(per_node, int):  # auto: measured on the node (never under srun: config.py refuses it)
        return {"tasks_per_node": None, "tasks": None}
    if per_node > 1:
        return {"tasks_per_node": per_node, "tasks": None}
    return {"tasks_per_node": None, "tasks": dist.nodes if dist.nodes > 1 else None}


def slurm_cpus(dist: DistributedSettings) -> int | None:
    """Cores per rank; `auto` / `tuned` leave it to Slurm (give Slurm runs a number)."""
    threads = dist.threads_per_process
    return threads if isinstance(threads, int) else None
