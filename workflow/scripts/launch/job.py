"""Run one job on every rank and wait: build the command, supervise the
ranks (bounded exit), and raise the one line that says what went wrong."""

from __future__ import annotations

import sys
import tempfile

from workflow.scripts.common.errors import Terminated, sigterm_raises
from workflow.scripts.launch import supervise
from workflow.scripts.launch.command import build, launch_env, ranks_per_node


def run(config: dict, info: dict, program: list[str], log_dir=None, quiet: bool = False) -> None:
    """Start `program` on every rank and wait, with the ranks' exit bounded
    (supervise.py); raises the one line that says what went wrong."""
    dist = config["distributed"]
    world = dist["nodes"] * ranks_per_node(config, info)
    with tempfile.TemporaryDirectory(prefix="cpuddp-launch-") as workdir, sigterm_raises():
        command, env = build(config, info, program, workdir), launch_env(config, info)
        if not quiet:
            print("launch: " + through_env(config, env) + " ".join(command), file=sys.stderr, flush=True)
        try:
            code, stuck = supervise.run(command, env, log_dir, world, dist["exit_grace_seconds"], quiet)
        except Terminated:  # supervise.run has stopped the launcher and its ranks
            raise supervise.report_stopped(log_dir, world) from None
    supervise.judge(code, stuck, log_dir, world, dist["exit_grace_seconds"])


def through_env(config: dict, env: dict) -> str:
    """What srun hands every rank in its environment (mpirun shows it in its
    own arguments)."""
    if config["distributed"].get("launcher") != "srun":
        return ""
    return "".join(f"{key}={env[key]} " for key in ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS") if key in env)
