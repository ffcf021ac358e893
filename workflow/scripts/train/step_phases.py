"""Where a rank's updates go in the run itself, phase by phase, and what of
an update is fixed against what grows with its tokens (issue 74).

bench.step_breakdown times one rank's step alone, on one batch over and
over; a real update also waits for the loader, for the all-reduce and for
the other ranks, and meets each batch's lengths once. On an AMD EPYC (Zen
4, 2 cores) a 2 x 1 SST-2-length run's update had about twice the fixed
cost of the step alone (52-60 ms against 28), so the run's own split is the
one that says what to cut. Phases, summed over the updates after the
warm-up (WARMUP_STEPS):

- data: waiting for the loader's next micro-batch (reading and collating);
- forward; backward: its computation, without the all-reduce it waited for;
- allreduce_exposed: what backward waited for the all-reduce (comm.py);
- clip: the gradient norm and clipping; optimizer: the step, the learning
  rate schedule and zeroing the gradients.

Logging, checkpoints and evaluation between updates are not in any phase.
The fixed cost and the cost per real token are a least-squares line
through (the update's real tokens, its seconds) over the same updates.
"""

from __future__ import annotations

import time

import numpy as np
import torch

# The first steps of a process that its steady rate leaves out: they build
# oneDNN's primitives, grow the allocator's pools and make the all-reduce's
# first connections (8-step tuning bursts that counted them read 141
# samples/s of a run that trained at 262, issue 74).
WARMUP_STEPS = 3
PHASES = ("data", "forward", "backward", "allreduce_exposed", "clip", "optimizer")


def real_tokens(batch: dict) -> int:
    """Real tokens of a micro-batch: packed batches hold only them, padded ones say so in their attention mask
    (0 for a batch of no tokens, e.g. features)."""
    mask, ids = batch.get("attention_mask"), batch.get("input_ids")
    if isinstance(mask, torch.Tensor):
        return int(mask.sum())
    return int(ids.numel()) if isinstance(ids, torch.Tensor) else 0


class StepPhases:
    """Seconds per phase of this rank's updates after `warmup` of them."""

    def __init__(self, warmup: int = WARMUP_STEPS):
        self.warmup = warmup
        self.updates = 0  # begun in this process
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.points: list[tuple[int, float]] = []  # (real tokens, seconds) per timed update
        self._data = 0.0  # loader time of the update being gathered
        self._at = 0.0
        self._begun = 0.0
        self._tokens = 0

    @property
    def timing(self) -> bool:
        return self.updates > self.warmup

    def batches(self, loader):
        """`loader`'s micro-batches, the wait for each counted as data."""
        iterator = iter(loader)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self._data += time.perf_counter() - start
            yield batch

    def begin(self, micro_batches: list) -> None:
        self.updates += 1
        self._begun = self._at = time.perf_counter()
        self._tokens = sum(real_tokens(b) for b in micro_batches)

    def lap(self, phase: str, less: float = 0.0) -> None:
        """The time since the last lap goes to `phase` (minus `less`, given to allreduce_exposed)."""
        now = time.perf_counter()
        if self.timing:
            self.seconds[phase] += now - self._at - less
            self.seconds["allreduce_exposed"] += less
        self._at = now

    def end(self) -> None:
        if self.timing:
            self.seconds["data"] += self._data
            self.points.append((self._tokens, time.perf_counter() - self._begun + self._data))
        self._data = 0.0

    def record(self) -> dict:
        """Per phase the mean seconds an update, the update's mean, and the fixed and per-token costs."""
        n = len(self.points)
        if not n:
            return {"updates": 0}
        out = {"updates": n, "update_seconds": round(sum(s for _, s in self.points) / n, 6),
               "phases": {k: round(v / n, 6) for k, v in self.seconds.items()},
               "mean_tokens": round(sum(t for t, _ in self.points) / n, 1)}
        tokens, seconds = np.array(self.points, dtype=float).T
        if n >= 8 and np.ptp(tokens) > 0:  # a line needs updates of different lengths
            per_token, fixed = np.polyfit(tokens, seconds, 1)
            out.update(fixed_seconds=round(float(fixed), 6), per_token_seconds=round(float(per_token), 9))
        return out


def describe(record: dict) -> str:
    """One line: the mean update, each phase's ms and share, and the fixed and per-token costs."""
    update = record["update_seconds"]
    parts = ", ".join(f"{k} {1e3 * v:.1f} ms ({100 * v / update:.0f}%)" for k, v in record["phases"].items())
    line = f"{1e3 * update:.1f} ms on {record['mean_tokens']:.0f} real tokens: {parts}"
    if "fixed_seconds" in record:
        line += (f"; fixed {1e3 * record['fixed_seconds']:.1f} ms an update + "
                 f"{1e6 * record['per_token_seconds']:.1f} us a real token")
    return line
