"""One line per run, printed by the dry run and the run's first lines:
where it runs (nodes of the hostfile's, ranks, threads), with what
(backend, MPI, precision policy) and where its results go.

A dry run prints those lines and Snakemake's job table: each job's block
(rule, input, output, reason, shell command; 200-600 lines for a sweep) and
the host header are left out (`brief_dry_run`); `-np` (printshellcmds on
the command line) shows them, as Snakemake does. A real run keeps them, and
with them the failed jobs' logs (show-failed-logs), which Snakemake's own
`--quiet rules` would drop too, so the profiles cannot set it."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from workflow.scripts.common.errors import UserError
from workflow.scripts.settings import layout
from workflow.scripts.settings.hostfile import read_hostfile

PRECISION = {"auto": "auto (bf16_master only where the nodes have native bf16 and it measures faster)",
             "fp32": "fp32", "bf16": "bf16 (refused on CPUs without native bf16)",
             "bf16_master": "bf16_master (refused on CPUs without native bf16)"}


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


def ranks_and_threads(dist: dict) -> str:
    """'2 rank(s) per node, threads auto (cores / ranks)', or how auto ranks are found."""
    ranks, threads = dist["processes_per_node"], dist["threads_per_process"]
    if layout.measured(dist):
        return ("ranks x threads measured (processes_per_node auto: this CPU model's cached layout, "
                "else short bursts of each split at the run's batch)")
    if ranks == layout.AUTO:
        return f"cores / {threads} rank(s) per node (processes_per_node auto), {threads} thread(s) per rank"
    threads = f"{threads} thread(s) per rank" if isinstance(threads, int) else f"threads {threads} (cores / ranks)"
    return f"{ranks} rank(s) per node, {threads}"


def run_line(name: str, run: dict, results: str, cluster: str | None, base: Path = Path(".")) -> str:
    dist = run["distributed"]
    machines = os.path.relpath(cluster) if cluster else "config.yaml (no cluster file)"
    return (f"cpuddp run {name}: {where(dist, base)}, {ranks_and_threads(dist)}, "
            f"backend {dist['backend']}, MPI {dist['mpi']}, precision {PRECISION[run['train']['precision']]}; "
            f"machines from {machines}; results in {results}/{name}/")


def experiment_line(experiment: str, runs: int, results: str) -> str:
    return (f"cpuddp experiment {experiment}: {runs} run(s); summary in {results}/summary.json,"
            f" report in {results}/report.html")


# The events of a job's block, and the header's quietness (snakemake.logging).
JOB_BLOCK_EVENTS = {"job_info", "group_info", "shellcmd"}
HEADER = "HOST"


def given(argv: list[str], short: str, *long: str) -> bool:
    """A flag on the command line, long or among short flags (-np)."""
    return any(w in long or re.fullmatch(f"-[a-zA-Z]*{short}[a-zA-Z]*", w) for w in argv)


def keep_record(record: logging.LogRecord) -> bool:
    """False for a job's block and the header, which a dry run leaves out."""
    event = getattr(getattr(record, "event", None), "value", None)
    quietness = getattr(getattr(record, "quietness", None), "name", None)
    return event not in JOB_BLOCK_EVENTS and quietness != HEADER


def brief_dry_run(argv: list[str], logger: logging.Logger) -> bool:
    """In a dry run without -p, leave the jobs' blocks out of Snakemake's logger."""
    if not given(argv, "n", "--dry-run", "--dryrun") or given(argv, "p", "--printshellcmds"):
        return False
    logger.addFilter(keep_record)
    return True
