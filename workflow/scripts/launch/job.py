"""Run one job on every rank and wait: build the command, supervise the
ranks (bounded exit), and raise the one line that says what went wrong."""

from __future__ import annotations

import socket
import sys
import tempfile

from workflow.scripts.settings.views import distributed_of
from workflow.scripts.launch import command, supervise, verdict
from workflow.scripts.launch.hosts import reachable


def run(config, info: dict, program: list[str], log_dir=None, quiet: bool = False,
        hosts: list[str] | None = None, hold: tuple[int, ...] = ()) -> None:
    """Start `program` on every rank (on `hosts`, default: the run's) and
    wait, with the ranks' exit bounded; raises the one line that says what
    went wrong (errors.Preempted when the ranks checkpointed on request).
    `hold`: fds the launch's guard keeps open until nothing of it runs."""
    dist = distributed_of(config)
    hosts = hosts or command.run_hosts(dist)
    world = world_size(config, info, hosts)
    with tempfile.TemporaryDirectory(prefix="cpuddp-launch-") as workdir:
        argv = command.build(config, info, program, workdir, hosts)
        if not quiet:
            print("launch: " + through_env(config, command.launch_env(config, info)) + " ".join(argv),
                  file=sys.stderr, flush=True)
        outcome = supervise.run(argv, command.launch_env(config, info), log_dir, world,
                                dist.exit_grace_seconds, quiet, dist.start_timeout, hold)
    if outcome.unstarted:
        placed = rank_hosts(config, info, hosts)
        nodes = list(dict.fromkeys(placed[r] for r in outcome.unstarted))
        raise verdict.unstarted(outcome.unstarted, placed, dist.start_timeout, not_answering(config, nodes))
    verdict.judge(outcome, log_dir, world, dist.exit_grace_seconds, dist.timeout_minutes)


def world_size(config, info: dict, hosts: list[str] | None = None) -> int:
    """How many ranks a launch on `hosts` (default: the run's) starts."""
    hosts = hosts or command.run_hosts(distributed_of(config))
    return (len(hosts) if hosts else distributed_of(config).nodes) * command.ranks_per_node(config, info)


def not_answering(config, nodes: list[str]) -> list[str]:
    """Of several hostfile nodes whose ranks did not start, those that do not
    answer now (launch/hosts.py): a launch starts no rank until every node's
    login has, so the missing ranks alone do not tell which node hangs."""
    dist = distributed_of(config)
    if len(nodes) < 2 or dist.launcher == "srun" or not dist.hostfile:
        return nodes
    alive, _ = reachable(config, dist.check_timeout_seconds, nodes)
    return [n for n in nodes if n not in alive] or nodes


def rank_hosts(config, info: dict, hosts: list[str] | None) -> list[str]:
    """The node of each rank, as command.build places them: `ppn` in a row
    on each host (this machine without a hostfile; under srun, the
    allocation's nodes in order)."""
    ppn, dist = command.ranks_per_node(config, info), distributed_of(config)
    if not hosts:
        hosts = [f"node {n + 1} of the Slurm allocation" for n in range(dist.nodes)] if dist.launcher == "srun" \
            else [socket.gethostname()]
    return [host for host in hosts for _ in range(ppn)]


def through_env(config, env: dict) -> str:
    """What srun hands every rank in its environment (mpirun shows it in its
    own arguments)."""
    if distributed_of(config).launcher != "srun":
        return ""
    return "".join(f"{key}={env[key]} " for key in ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS") if key in env)
