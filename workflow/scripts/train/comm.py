"""The gradient all-reduce: its compression, and how long each step waits
for it.

DDP calls the comm hook when a bucket's gradients are ready; after the
last call the backward computation is done, so whatever time backward()
still takes is spent waiting for the all-reduce to finish. The hook also
counts buckets and the backward passes that reduced (with gradient
accumulation, one in `accumulation`).
"""

from __future__ import annotations

import time

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

COMPRESSION = ("none", "fp16", "bf16", "powersgd")


def reducer(compression: str):
    """(hook, its state) that all-reduces a bucket with `compression`."""
    if compression == "powersgd":
        # Rank-1 approximation after 10 plain steps (the error feedback needs a start).
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                            start_powerSGD_iter=10, use_error_feedback=True, warm_start=True)
        return powerSGD_hook.powerSGD_hook, state
    hooks = {"none": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
             "bf16": default_hooks.bf16_compress_hook}
    if compression not in hooks:
        raise ValueError(f"distributed.gradient_compression: {compression!r}; choose one of: {' '.join(COMPRESSION)}")
    return hooks[compression], None


class CommTimer:
    """DDP comm hook state that reduces buckets and measures the wait."""

    def __init__(self, compression: str = "none"):
        self.inner, self.inner_state = reducer(compression)
        self.compression = compression
        self.last_ready = 0.0
        self.wait_seconds = 0.0
        self.step_seconds = 0.0
        self._step_start = None
        self.buckets = 0  # hook calls
        self.backwards = 0
        self.reducing_backwards = 0

    @staticmethod
    def hook(state, bucket):  # no annotations: DDP compares them to real types
        state.last_ready = time.perf_counter()
        state.buckets += 1
        return state.inner(state.inner_state, bucket)

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(), adding the time spent after the last bucket was ready."""
        now = time.perf_counter()
        if self._step_start is not None:
            self.step_seconds += now - self._step_start
        self._step_start = now
        self.last_ready = 0.0
        loss.backward()
        self.backwards += 1
        if self.last_ready:
            self.reducing_backwards += 1
            self.wait_seconds += time.perf_counter() - self.last_ready

    def wait_share(self) -> float:
        """Share of step time (between backward calls) spent waiting."""
        return round(self.wait_seconds / self.step_seconds, 4) if self.step_seconds else 0.0

    def counts(self) -> dict:
        return {"buckets_reduced": self.buckets, "backward_passes": self.backwards,
                "reducing_backward_passes": self.reducing_backwards}
