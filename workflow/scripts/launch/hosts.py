"""The nodes a retry runs on: those of the hostfile that answer, when some
are gone for good and at least `distributed.min_nodes` remain. The ranks
then keep the global batch by raising gradient accumulation."""

from __future__ import annotations

import sys

from workflow.scripts.common.errors import UserError
from workflow.scripts.settings.hostfile import read_hostfile
from workflow.scripts.settings.views import DistributedSettings
from workflow.scripts.launch import mpi
from workflow.scripts.launch.reach import reach_each

# Each node answers with its rank (the launcher's own rank variables).
ANSWER = ("import json; from workflow.scripts.launch import ranks; "
          "print('CPUDDP-NODE ' + json.dumps({'rank': ranks.read().rank}), flush=True)")


def reachable(dist: DistributedSettings, timeout: float, pool: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(hosts that answer, in hostfile order; what is wrong with the others)."""
    hosts = pool or read_hostfile(dist.hostfile)
    reports, problems = reach_each(dist, mpi.detect_launcher(dist), hosts, [sys.executable, "-c", ANSWER],
                                   timeout)
    return [hosts[r["rank"]] for r in reports], problems


def for_retry(dist: DistributedSettings, pool: list[str] | None = None) -> tuple[list[str] | None, list[str]]:
    """(hosts to run on, hosts dropped); (None, []) keeps the run's own.
    `pool`: the hosts this launch leased (packed runs), else the hostfile's."""
    min_nodes = dist.min_nodes or dist.nodes
    if dist.launcher == "srun":
        if min_nodes < dist.nodes:
            # The Slurm plugin takes `nodes` as a whole number (no 2-4 range),
            # so a retry cannot ask for fewer; Slurm picks the nodes of each try.
            print(f"warning: distributed.min_nodes does not apply under Slurm: this try runs on a new "
                  f"allocation of {dist.nodes} nodes (a partition with fewer up makes it pend)", file=sys.stderr)
        return None, []
    candidates = pool or (read_hostfile(dist.hostfile) if dist.hostfile else [])
    if not dist.hostfile or min_nodes >= dist.nodes and len(candidates) <= dist.nodes:
        return None, []
    alive, problems = reachable(dist, dist.check_timeout_seconds, pool)
    wanted = candidates[:dist.nodes]
    if len(alive) < min_nodes:
        raise UserError(f"only {len(alive)} of the hostfile's nodes answer ({'; '.join(problems)}), fewer than "
                        f"distributed.min_nodes ({min_nodes}); bring nodes back or lower min_nodes")
    chosen = alive[:dist.nodes]
    dropped = [h for h in wanted if h not in chosen]
    if dropped:
        print(f"warning: continuing on {len(chosen)} nodes without {', '.join(dropped)} "
              f"({'; '.join(problems)})", file=sys.stderr)
    return chosen, dropped
