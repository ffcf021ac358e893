"""The INT8 accuracy gate: how far int8 metrics may fall behind fp32's."""

from __future__ import annotations

from workflow.scripts.common import tasks
from workflow.scripts.common.errors import UserError


def _scale(task: tasks.Task) -> float:
    """Factor to percentage points: GLUE metrics are fractions, SQuAD percentages."""
    return 1.0 if task.is_qa else 100.0


LOWER_IS_BETTER = {"mse"}


def accuracy_drops(task: tasks.Task, fp32: dict, int8: dict) -> dict[str, float]:
    """Points (percentage points) int8 is behind fp32, per task metric (only
    evaluation.metric when it is set); for mse, how much higher it is."""
    scale = _scale(task)
    gated = (task.chosen_metric,) if task.chosen_metric else task.metrics
    drops = {}
    for name, value in fp32.items():
        if name.removesuffix("_mm") in gated and name in int8:
            sign = -1 if name.removesuffix("_mm") in LOWER_IS_BETTER else 1
            drops[name] = sign * (value - int8[name]) * scale
    return drops


def check_accuracy_gate(task: tasks.Task, fp32: dict, int8: dict, max_drop: float) -> None:
    """UserError naming both numbers of every metric int8 loses more than `max_drop` points on."""
    scale = _scale(task)
    failed = [f"{name} int8 {int8[name] * scale:.2f} vs fp32 {fp32[name] * scale:.2f} (-{drop:.2f} points)"
              for name, drop in accuracy_drops(task, fp32, int8).items() if drop > max_drop]
    if failed:
        raise UserError(f"INT8 accuracy gate: {'; '.join(failed)}, more than "
                        f"quantization.max_accuracy_drop {max_drop:g} point(s); "
                        "try more quantization.calibration_samples or raise the limit")


def within_gate(task: tasks.Task, fp32: dict, other: dict, max_drop: float) -> tuple[bool, dict[str, float]]:
    """(no metric more than `max_drop` points behind fp32, the drops rounded to 0.01 point)."""
    drops = accuracy_drops(task, fp32, other)
    return all(d <= max_drop for d in drops.values()), {k: round(v, 2) for k, v in drops.items()}
