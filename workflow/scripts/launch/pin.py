"""Run by every rank first: bind this process to its share of its node's
cores, then become the rank's program (affinity survives exec). A rank the
MPI library has already bound (Intel MPI's I_MPI_PIN_DOMAIN, srun
--cpu-bind) keeps that binding, and says so.

    python -m workflow.scripts.launch.pin --threads T -- PROGRAM...
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from workflow.scripts.probes import hardware
from workflow.scripts.common.errors import run_cli
from workflow.scripts.launch import ranks


def physical_cores(text: str | None = None, allowed=None) -> list[list[tuple[int, ...]]]:
    """Per socket, its physical cores as tuples of the logical CPUs we may use."""
    text = hardware.CPUINFO.read_text() if text is None else text
    allowed = set(os.sched_getaffinity(0) if allowed is None else allowed)
    sockets: dict[str, dict[str, list[int]]] = {}
    for block in hardware._cpuinfo_blocks(text):
        if "processor" not in block or int(block["processor"]) not in allowed:
            continue
        core = sockets.setdefault(block.get("physical id", "0"), {})
        core.setdefault(block.get("core id", block["processor"]), []).append(int(block["processor"]))
    return [[tuple(cpus) for _, cpus in sorted(cores.items(), key=lambda c: min(c[1]))]
            for _, cores in sorted(sockets.items(), key=lambda s: int(s[0]))]


def rank_cpus(local_rank: int, local_size: int, threads: int, sockets) -> set[int] | None:
    """The logical CPUs of a rank's `threads` cores, ranks spread evenly over the
    sockets when they divide; None when the node has too few cores to pin."""
    if threads * local_size > sum(len(s) for s in sockets):
        return None
    per_socket = local_size // len(sockets)
    if len(sockets) > 1 and local_size % len(sockets) == 0 and \
            all(len(s) >= threads * per_socket for s in sockets):
        cores = sockets[local_rank // per_socket]
        start = (local_rank % per_socket) * threads
    else:
        cores = [core for socket_cores in sockets for core in socket_cores]
        start = local_rank * threads
    return {cpu for core in cores[start:start + threads] for cpu in core}


CPUSETS = ("/sys/fs/cgroup/cpuset.cpus.effective", "/sys/fs/cgroup/cpuset/cpuset.effective_cpus")


def parse_cpu_list(text: str) -> set[int]:
    """Linux list form ("0-3,8") -> {0, 1, 2, 3, 8}."""
    cpus = set()
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def node_cpus(cpusets=CPUSETS) -> set[int]:
    """The CPUs this job may use on the node before any rank is bound: its
    cgroup's cpuset (a container, a Slurm job), else every online CPU. Not
    this rank's affinity: the MPI library may have narrowed that already."""
    for path in cpusets:
        try:
            return parse_cpu_list(Path(path).read_text())
        except (OSError, ValueError):
            continue
    return set(range(os.cpu_count() or 1))


def decide(local_rank: int, local_size: int, threads: int, allowed: set[int], node: set[int],
           cpuinfo: str | None = None) -> tuple[set[int] | None, str | None]:
    """(CPUs to bind this rank to, or None to leave it; the line to print, if any)."""
    if allowed < node:  # the launcher bound it: Intel MPI's pinning domains, srun --cpu-bind
        cores = sum(len(s) for s in physical_cores(cpuinfo, allowed))
        short = f", fewer than its {threads} threads" if cores < threads else ""
        return None, f"pin: already pinned by the MPI library: cores {hardware.cpu_list(allowed)}{short}; kept"
    sockets = physical_cores(cpuinfo, node)
    cpus = rank_cpus(local_rank, local_size, threads, sockets)
    if cpus is None:
        return None, (f"pin: not pinned: {local_size} ranks x {threads} threads exceed this node's "
                      f"{sum(len(s) for s in sockets)} cores")
    return cpus, None


def pin(args) -> None:
    """Bind this rank to its cores, then become `program` (affinity survives exec)."""
    env = ranks.read()
    cpus, line = decide(env.local_rank, env.local_world_size, args.threads, set(os.sched_getaffinity(0)),
                        node_cpus())
    if line and env.local_rank == 0:
        print(line, file=sys.stderr)
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
        os.environ.setdefault("OMP_PLACES", "cores")
        os.environ.setdefault("OMP_PROC_BIND", "close")
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    os.execvp(program[0], program)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("program", nargs=argparse.REMAINDER)
    pin(parser.parse_args(argv))


if __name__ == "__main__":
    run_cli(main)
