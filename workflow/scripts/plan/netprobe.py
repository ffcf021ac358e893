"""The network as the gradient all-reduce sees it: time gloo all-reduces of
several sizes on the first 2, 3, ... ranks (one rank per node), and let
rank 0 write every point. Started on every node by the launcher
(plan/network.py), like training.

    python -m workflow.scripts.plan.netprobe --out network.json --log-dir D [--sizes-mb 0.004 1 16] [--repeats 5]

Each point is the slowest rank's median time of `repeats` all-reduces of a
float32 tensor of that size, after one unmeasured all-reduce.
"""

from __future__ import annotations

import socket
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

from workflow.scripts.common import logs

from workflow.scripts.settings import step
from workflow.scripts.common.atomic import write_json
from workflow.scripts.launch import ranks
from workflow.scripts.train import process_group

SIZES_MB = (0.004, 0.064, 1.0, 4.0, 16.0)


def timed_allreduce(tensor: torch.Tensor, group, repeats: int) -> float:
    """Median seconds of one all-reduce on this rank (after a warm-up)."""
    dist.all_reduce(tensor, group=group)
    times = []
    for _ in range(repeats):
        dist.barrier(group=group)
        start = time.perf_counter()
        dist.all_reduce(tensor, group=group)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def slowest(seconds: float, group) -> float:
    value = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
    return float(value)


def probe(world: int, rank: int, sizes_mb, repeats: int) -> list[dict]:
    """Points {ranks, bytes, seconds} for every group of the first w ranks."""
    points = []
    for width in range(2, world + 1):
        group = dist.new_group(list(range(width)))  # every rank takes part in creating it
        if rank >= width:
            continue
        for size in sizes_mb:
            tensor = torch.ones(max(1, int(size * 1e6) // 4))
            seconds = slowest(timed_allreduce(tensor, group, repeats), group)
            points.append({"ranks": width, "bytes": tensor.numel() * 4, "seconds": seconds})
    return points


def main(argv=None) -> None:
    parser = step.parser(__doc__, config=False)
    parser.add_argument("--out", required=True, help="JSON file rank 0 writes")
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=list(SIZES_MB))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout-minutes", type=float, default=5)
    parser.add_argument("--log-dir", required=True, help="folder for rank<N>.log and rank<N>.exit")
    args = parser.parse_args(argv)
    env = ranks.read()
    torch.set_num_threads(1)
    with logs.exit_status(args.log_dir, env.rank) as status, \
            process_group.joined("gloo", env, args.timeout_minutes):
        points = probe(env.world_size, env.rank, args.sizes_mb, args.repeats)
        hosts = [None] * env.world_size
        dist.all_gather_object(hosts, socket.gethostname())
        if env.is_main:
            write_json(Path(args.out), {"hosts": hosts, "points": points})
        dist.barrier()
        status.trained(exit_within=60)


if __name__ == "__main__":
    step.entry(main)
