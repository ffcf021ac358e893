"""The two timeouts of a gloo process group (train/process_group.py), on
real processes: a rank that waits for a slow peer longer than
distributed.timeout_minutes while the model is built is not failed (the
setup gets SETUP_MINUTES), while in the training steps the same wait fails
within the timeout; after the steps the setup's timeout is back."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers.ranks import free_port
from workflow.scripts.launch.ranks import DistEnv
from workflow.scripts.train import process_group

TIMEOUT_MINUTES = 0.05  # 3 s
LATE_S = 6  # twice the steps' timeout


def late_peer(rank: int, port: int, results: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    process_group.init("gloo", DistEnv(rank, 2, rank, 2, "test"), TIMEOUT_MINUTES)
    try:
        if rank == 1:
            time.sleep(LATE_S)  # a slow build: loading, compiling a kernel
        dist.all_reduce(torch.ones(1))  # DDP's first broadcast, say
        results[("setup", rank)] = "ok"
        with process_group.steps("gloo", TIMEOUT_MINUTES):
            if rank == 1:
                time.sleep(LATE_S)  # a frozen rank
            started = time.monotonic()
            try:
                dist.all_reduce(torch.ones(1))
                results[("steps", rank)] = "ok"
            except RuntimeError as err:
                results[("steps", rank)] = f"failed after {time.monotonic() - started:.1f} s: {err}"
        gloo = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        results[("after", rank)] = gloo.options._timeout.total_seconds()
    finally:
        if rank == 0:
            time.sleep(LATE_S)  # rank 1 leaves its step's all-reduce first
        dist.destroy_process_group()


def test_a_slow_build_is_waited_for_and_a_frozen_step_is_not():
    results = mp.Manager().dict()
    mp.spawn(late_peer, args=(free_port(), results), nprocs=2, join=True)
    assert results[("setup", 0)] == results[("setup", 1)] == "ok"
    failed = results[("steps", 0)]
    assert failed.startswith("failed after"), failed
    assert float(failed.split()[2]) < LATE_S, failed  # the steps' timeout, not the setup's
    assert results[("after", 0)] == 60 * process_group.SETUP_MINUTES
