"""The gradient all-reduce: its compression, and how long each step waits
for it.

DDP calls the comm hook when a bucket's gradients are ready; after the
last call the backward computation is done, so whatever time backward()
still takes is spent waiting for the all-reduce to finish. The hook also
counts buckets and the backward passes that reduced (with gradient
accumulation, one in `accumulation`), and, after the first `warmup`
updates (DDP rebuilds its buckets after the first), times each update and
each bucket's all-reduce: the step split into compute, exposed
communication and overlap that the scaling plan predicts.
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


class BucketTimes:
    """Per bucket of the timed updates: bytes, all-reduces, their seconds
    (from ready, or from the previous bucket's end if later, to done) and
    ready offsets from the start of backward."""

    def __init__(self):
        self.by_bucket: dict[tuple[int, int], list[float]] = {}
        self.previous_done = 0.0

    def add(self, index: int, nbytes: int, ready: float, done: float, backward_start: float) -> None:
        entry = self.by_bucket.setdefault((index, nbytes), [0, 0.0, 0.0])
        seconds = done - max(ready, self.previous_done if index else ready)
        self.previous_done = done
        entry[0] += 1
        entry[1] += seconds
        entry[2] += ready - backward_start

    def record(self) -> list[dict]:
        return [{"index": i, "bytes": b, "allreduces": n, "seconds": round(s / n, 6), "ready": round(r / n, 6)}
                for (i, b), (n, s, r) in sorted(self.by_bucket.items())]


class CommTimer:
    """DDP comm hook state that reduces buckets and measures the wait."""

    def __init__(self, compression: str = "none", warmup: int = 2):
        self.inner, self.inner_state = reducer(compression)
        self.warmup = warmup
        self.updates = 0
        self._update_start = None
        self._backward_start = 0.0
        self._bucket = 0
        self.timed = {"updates": 0, "update_seconds": 0.0, "reductions": 0, "exposed_seconds": 0.0}
        self.bucket_times = BucketTimes()
        self.compression = compression
        self.last_ready = 0.0
        self.wait_seconds = 0.0
        self.step_seconds = 0.0
        self._step_start = None
        self.buckets = 0  # hook calls
        self.backwards = 0
        self.reducing_backwards = 0

    @property
    def timing(self) -> bool:
        return self.updates > self.warmup

    @staticmethod
    def hook(state, bucket):  # no annotations: DDP compares them to real types
        state.last_ready = ready = time.perf_counter()
        state.buckets += 1
        future = state.inner(state.inner_state, bucket)
        if not state.timing:
            return future
        index, nbytes, start = state._bucket, bucket.buffer().numel() * bucket.buffer().element_size(), \
            state._backward_start
        state._bucket += 1

        def done(reduced):
            state.bucket_times.add(index, nbytes, ready, time.perf_counter(), start)
            return reduced.value()
        return future.then(done)

    def begin_update(self) -> None:
        """Called as each update starts: times the one before."""
        now = time.perf_counter()
        if self.timing and self._update_start is not None:
            self.timed["updates"] += 1
            self.timed["update_seconds"] += now - self._update_start
        self.updates += 1
        self._update_start = now

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(), adding the time spent after the last bucket was ready."""
        now = time.perf_counter()
        self._backward_start, self._bucket = now, 0
        if self._step_start is not None:
            self.step_seconds += now - self._step_start
        self._step_start = now
        self.last_ready = 0.0
        loss.backward()
        self.backwards += 1
        if self.last_ready:
            self.reducing_backwards += 1
            waited = time.perf_counter() - self.last_ready
            self.wait_seconds += waited
            if self.timing:
                self.timed["reductions"] += 1
                self.timed["exposed_seconds"] += waited

    def wait_share(self) -> float:
        """Share of step time (between backward calls) spent waiting."""
        return round(self.wait_seconds / self.step_seconds, 4) if self.step_seconds else 0.0

    def counts(self) -> dict:
        return {"buckets_reduced": self.buckets, "backward_passes": self.backwards,
                "reducing_backward_passes": self.reducing_backwards}

    def step_split(self) -> dict:
        """Mean update of the timed ones: seconds, compute, exposed
        communication, all-reduce time and overlap; and every bucket."""
        n = self.timed["updates"]
        if not n:
            return {"updates": 0}
        buckets = self.bucket_times.record()
        update = self.timed["update_seconds"] / n
        exposed = self.timed["exposed_seconds"] / max(self.timed["reductions"], 1)
        communication = sum(b["seconds"] for b in buckets)
        return {"updates": n, "update_seconds": round(update, 6), "compute_seconds": round(update - exposed, 6),
                "exposed_seconds": round(exposed, 6), "communication_seconds": round(communication, 6),
                "overlap_seconds": round(max(communication - exposed, 0.0), 6), "buckets": buckets}
