"""Learning-rate schedules by their transformers names (train.lr_scheduler_type),
with transformers' formulas.

Written here because `transformers.get_scheduler` imports
transformers.trainer_utils, which imports peft when it is installed: seconds
of import in every rank of every run for three one-line formulas.
tests/unit/test_schedule.py holds them equal to transformers' step by step.
"""

from __future__ import annotations

import math
from functools import partial

from torch.optim.lr_scheduler import LambdaLR


def _linear(step: int, *, warmup: int, total: int) -> float:
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


def _cosine(step: int, *, warmup: int, total: int) -> float:
    if step < warmup:
        return float(step) / float(max(1, warmup))
    progress = float(step - warmup) / float(max(1, total - warmup))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))


def _constant_with_warmup(step: int, *, warmup: int, total: int) -> float:
    if step < warmup:
        return float(step) / float(max(1.0, warmup))
    return 1.0


SCHEDULES = {"linear": _linear, "cosine": _cosine, "constant_with_warmup": _constant_with_warmup}


def scheduler(name: str, optimizer, warmup: int, total: int) -> LambdaLR:
    """The LambdaLR transformers' get_scheduler(name, ...) builds (the schema lists the names)."""
    return LambdaLR(optimizer, partial(SCHEDULES[name], warmup=warmup, total=total))
