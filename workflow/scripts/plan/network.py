"""Measure the network between a run's nodes, as the gradient all-reduce
sees it: plan/netprobe.py on one rank per node, started by the launcher
that trains (same hosts, same MPI, same interface), bounded like training.

    python -m workflow.scripts.plan.network --config C --environment E --out network.json [--log-dir D]

C and E are the train configuration and environment.json of the run with
the most nodes. The plan (plan/plan.py) fits bandwidth and latency to
the points.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
from pathlib import Path

from workflow.scripts.settings import step
from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.errors import UserError
from workflow.scripts.launch import job


def probe_launch(config: dict, info: dict) -> tuple[dict, dict]:
    """The run's nodes, one single-threaded rank on each."""
    config = copy.deepcopy(config)
    config["distributed"].update(processes_per_node=1, threads_per_process=1)
    return config, {**info, "processes_per_node": 1, "threads_per_process": 1, "backend": "gloo"}


def measure(config: dict, info: dict, out: Path, log_dir: Path, sizes_mb=None, repeats: int = 5) -> dict:
    if config["distributed"]["nodes"] < 2:
        raise UserError("measuring the network needs a run on at least 2 nodes (distributed.nodes and a hostfile)")
    config, info = probe_launch(config, info)
    program = [sys.executable, "-m", "workflow.scripts.plan.netprobe", "--out", str(out), "--log-dir",
               str(log_dir), "--repeats", str(repeats),
               "--timeout-minutes", str(config["distributed"]["timeout_minutes"])]
    if sizes_mb:
        program += ["--sizes-mb", *map(str, sizes_mb)]
    try:
        job.run(config, info, program, log_dir, quiet=True)
    except UserError as err:
        raise UserError(f"measuring the network between the nodes failed: {err}") from None
    return read_json(out)


def main(argv=None) -> None:
    parser = step.parser(__doc__, environment=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--log-dir", help="rank logs (default: a temporary folder)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    config, info = step.read_config(args), json.loads(Path(args.environment).read_text())
    with tempfile.TemporaryDirectory(prefix="cpuddp-netprobe-") as scratch:
        result = measure(config, info, Path(args.out), Path(args.log_dir or scratch), repeats=args.repeats)
    print(f"network: {len(result['points'])} all-reduce times between {', '.join(result['hosts'])} -> {args.out}")


if __name__ == "__main__":
    step.entry(main)
