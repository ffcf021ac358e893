"""One line per run, printed by the dry run and the run's first lines:
where it runs (nodes of the hostfile's, ranks, threads), with what
(backend, MPI, precision policy) and where its results go."""

from __future__ import annotations

import os
from pathlib import Path

from workflow.scripts.common.errors import UserError
from workflow.scripts.common.hostfile import read_hostfile

PRECISION = {"auto": "auto (bf16 only where the nodes have native bf16 and it measures faster)",
             "fp32": "fp32", "bf16": "bf16 (refused on CPUs without native bf16)"}


def where(dist: dict, base: Path = Path(".")) -> str:
    """'2 of the hostfile's 4 nodes (hostfile)', 'this machine' or the Slurm allocation."""
    nodes = dist["nodes"]
    if dist.get("launcher") == "srun":
        return f"{nodes} node(s) of a Slurm allocation"
    if not dist.get("hostfile"):
        return "this machine (no hostfile)"
    try:
        listed = len(read_hostfile(base / dist["hostfile"]))
    except UserError:
        listed = "?"
    return f"using {nodes} of the hostfile's {listed} nodes ({dist['hostfile']})"


def run_line(name: str, run: dict, results: str, cluster: str | None, base: Path = Path(".")) -> str:
    dist = run["distributed"]
    threads = dist["threads_per_process"]
    threads = f"{threads} thread(s) per rank" if isinstance(threads, int) else f"threads {threads} (cores / ranks)"
    machines = os.path.relpath(cluster) if cluster else "config.yaml (no cluster file)"
    return (f"cpuddp run {name}: {where(dist, base)}, {dist['processes_per_node']} rank(s) per node, {threads}, "
            f"backend {dist['backend']}, MPI {dist['mpi']}, precision {PRECISION[run['train']['precision']]}; "
            f"machines from {machines}; results in {results}/{name}/")
