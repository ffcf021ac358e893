"""How long each step waits for the gradient all-reduce.

DDP calls the comm hook when a bucket's gradients are ready; after the
last call the backward computation is done, so whatever time backward()
still takes is spent waiting for the all-reduce to finish.
"""

from __future__ import annotations

import time

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


class CommTimer:
    """DDP comm hook state that measures all-reduce wait per step."""

    def __init__(self):
        self.last_ready = 0.0
        self.wait_seconds = 0.0
        self.step_seconds = 0.0
        self._step_start = None

    @staticmethod
    def hook(state, bucket):  # no annotations: DDP compares them to real types
        state.last_ready = time.perf_counter()
        return default_hooks.allreduce_hook(None, bucket)

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(), adding the time spent after the last bucket was ready."""
        now = time.perf_counter()
        if self._step_start is not None:
            self.step_seconds += now - self._step_start
        self._step_start = now
        self.last_ready = 0.0
        loss.backward()
        if self.last_ready:
            self.wait_seconds += time.perf_counter() - self.last_ready

    def wait_share(self) -> float:
        """Share of step time (between backward calls) spent waiting."""
        return round(self.wait_seconds / self.step_seconds, 4) if self.step_seconds else 0.0
