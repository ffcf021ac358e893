"""Preemption: SIGTERM (what Slurm sends before it kills a job, and what
Ctrl-C becomes through mpirun) asks for a checkpoint at the next update
boundary, then an exit with errors.PREEMPTED; the retry resumes from it.

One rank may get the signal alone, so each update ends with a one-number
all-reduce that tells every rank whether any rank was asked to stop.
"""

from __future__ import annotations

import signal

import torch
import torch.distributed as dist


class StopRequests:
    def __init__(self):
        self.signalled = False
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.signalled = True

    def anywhere(self) -> bool:
        """Whether any rank was asked to stop (a collective: every rank calls it)."""
        flag = torch.tensor([int(self.signalled)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())
