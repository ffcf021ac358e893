"""Run one job on every rank and wait: build the command, supervise the
ranks (bounded exit), and raise the one line that says what went wrong."""

from __future__ import annotations

import socket
import sys
import tempfile

from workflow.scripts.settings.views import DistributedSettings
from workflow.scripts.launch import command, supervise, verdict
from workflow.scripts.launch.hosts import reachable


def run(dist: DistributedSettings, info: dict, program: list[str], log_dir=None, quiet: bool = False,
        hosts: list[str] | None = None, hold: tuple[int, ...] = ()) -> None:
    """Start `program` on every rank (on `hosts`, default: the run's) and
    wait, with the ranks' exit bounded; raises the one line that says what
    went wrong (errors.Preempted when the ranks checkpointed on request).
    `hold`: fds the launch's guard keeps open until nothing of it runs."""
    hosts = hosts or command.run_hosts(dist)
    world = world_size(dist, info, hosts)
    with tempfile.TemporaryDirectory(prefix="cpuddp-launch-") as workdir:
        argv = command.build(dist, info, program, workdir, hosts)
        if not quiet:
            print("launch: " + through_env(dist, command.launch_env(dist, info)) + " ".join(argv),
                  file=sys.stderr, flush=True)
        outcome = supervise.run(argv, command.launch_env(dist, info), log_dir, world,
                                dist.exit_grace_seconds, quiet, dist.start_timeout, hold)
    if outcome.unstarted:
        placed = rank_hosts(dist, info, hosts)
        nodes = list(dict.fromkeys(placed[r] for r in outcome.unstarted))
        raise verdict.unstarted(outcome.unstarted, placed, dist.start_timeout, not_answering(dist, nodes))
    verdict.judge(outcome, log_dir, world, dist.exit_grace_seconds, dist.timeout_minutes)


def world_size(dist: DistributedSettings, info: dict, hosts: list[str] | None = None) -> int:
    """How many ranks a launch on `hosts` (default: the run's) starts."""
    hosts = hosts or command.run_hosts(dist)
    return (len(hosts) if hosts else dist.nodes) * command.ranks_per_node(dist, info)


def not_answering(dist: DistributedSettings, nodes: list[str]) -> list[str]:
    """Of several hostfile nodes whose ranks did not start, those that do not
    answer now (launch/hosts.py): a launch starts no rank until every node's
    login has, so the missing ranks alone do not tell which node hangs."""
    if len(nodes) < 2 or dist.launcher == "srun" or not dist.hostfile:
        return nodes
    alive, _ = reachable(dist, dist.check_timeout_seconds, nodes)
    return [n for n in nodes if n not in alive] or nodes


def rank_hosts(dist: DistributedSettings, info: dict, hosts: list[str] | None) -> list[str]:
    """The node of each rank, as command.build places them: `ppn` in a row
    on each host (this machine without a hostfile; under srun, the
    allocation's nodes in order)."""
    ppn = command.ranks_per_node(dist, info)
    if not hosts:
        hosts = [f"node {n + 1} of the Slurm allocation" for n in range(dist.nodes)] if dist.launcher == "srun" \
            else [socket.gethostname()]
    return [host for host in hosts for _ in range(ppn)]


def through_env(dist: DistributedSettings, env: dict) -> str:
    """What srun hands every rank in its environment (mpirun shows it in its
    own arguments)."""
    if dist.launcher != "srun":
        return ""
    return "".join(f"{key}={env[key]} " for key in ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS") if key in env)
