"""Measure the network between a run's nodes, as the gradient all-reduce
sees it: plan/netprobe.py on one rank per node, started by the launcher
that trains (same hosts, same MPI, same interface), bounded like training.

    python -m workflow.scripts.plan.network --config C --environment E --out network.json [--log-dir D]

C and E are the train configuration and environment.json of the run with
the most nodes. The plan (plan/plan.py) fits bandwidth and latency to
the points.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from workflow.scripts.settings import step
from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.errors import UserError
from workflow.scripts.launch import job
from workflow.scripts.settings.views import DistributedSettings, TrainView


def probe_launch(dist: DistributedSettings, info: dict) -> tuple[DistributedSettings, dict]:
    """The run's nodes, one single-threaded rank on each."""
    dist = dataclasses.replace(dist, processes_per_node=1, threads_per_process=1)
    return dist, {**info, "processes_per_node": 1, "threads_per_process": 1, "backend": "gloo"}


def measure(dist: DistributedSettings, info: dict, out: Path, log_dir: Path, sizes_mb=None, repeats: int = 5) -> dict:
    if dist.nodes < 2:
        raise UserError("measuring the network needs a run on at least 2 nodes (distributed.nodes and a hostfile)")
    dist, info = probe_launch(dist, info)
    program = [sys.executable, "-m", "workflow.scripts.plan.netprobe", "--out", str(out), "--log-dir",
               str(log_dir), "--repeats", str(repeats),
               "--timeout-minutes", str(dist.timeout_minutes)]
    if sizes_mb:
        program += ["--sizes-mb", *map(str, sizes_mb)]
    try:
        job.run(dist, info, program, log_dir, quiet=True)
    except UserError as err:
        raise UserError(f"measuring the network between the nodes failed: {err}") from None
    return read_json(out)


def main(argv=None) -> None:
    parser = step.parser(__doc__, environment=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--log-dir", help="rank logs (default: a temporary folder)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    dist, info = step.read_view(args, TrainView).distributed, json.loads(Path(args.environment).read_text())
    with tempfile.TemporaryDirectory(prefix="cpuddp-netprobe-") as scratch:
        result = measure(dist, info, Path(args.out), Path(args.log_dir or scratch), repeats=args.repeats)
    print(f"network: {len(result['points'])} all-reduce times between {', '.join(result['hosts'])} -> {args.out}")


if __name__ == "__main__":
    step.entry(main)
