"""Timing several models side by side on the same rows, in one process.

Throughput: one unmeasured pass of every model (compilers and shape caches
see every shape), then interleaved rounds, every model once per round, so
that a shared machine slows them alike; samples/s is the median of the
rounds. Latency at batch size 1: row by row, every model in turn, after a
short warm-up; p50 and p99 in milliseconds. A model is (callable, autocast).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from workflow.scripts.infer.runtime import LATENCY_ROWS, LATENCY_WARMUP, forward_all, model_inputs
from workflow.scripts.data.batching import pad_collate

SPEED_ROWS = 512  # throughput: the first rows of the first validation split
ROUNDS = 3


def speed_split(split, rows: int = SPEED_ROWS):
    """The rows every model is timed on: the first `rows` of `split`."""
    return split.select(range(min(rows, len(split))))


def throughput(models: dict, split, batch_size: int, pad_id: int, rounds: int = ROUNDS) -> dict[str, list[float]]:
    """name -> samples/s of every round (after one unmeasured pass each)."""
    for model, autocast in models.values():
        forward_all(model, split, batch_size, pad_id, autocast)
    measured = {name: [] for name in models}
    for _ in range(rounds):
        for name, (model, autocast) in models.items():
            _, seconds = forward_all(model, split, batch_size, pad_id, autocast)
            measured[name].append(len(split) / seconds)
    return measured


def median(values: list[float]) -> float:
    return round(float(np.median(values)), 3)


@torch.inference_mode()
def latency(models: dict, split, pad_id: int, rows: int = LATENCY_ROWS) -> dict[str, dict]:
    """name -> p50 and p99 milliseconds at batch size 1, models taking turns on each row."""
    collate = pad_collate(pad_id)
    inputs = model_inputs(split)
    samples = [collate([inputs[i]]) for i in range(min(rows, len(split)))]
    times = {name: [] for name in models}
    for j, batch in enumerate(samples[:LATENCY_WARMUP] + samples):
        for name, (model, autocast) in models.items():
            start = time.perf_counter()
            with autocast():
                model(**batch)
            if j >= LATENCY_WARMUP:
                times[name].append(1000.0 * (time.perf_counter() - start))
    result = {}
    for name, values in times.items():
        p50, p99 = np.percentile(values, [50, 99])
        result[name] = {"latency_ms_p50": round(float(p50), 3), "latency_ms_p99": round(float(p99), 3)}
    return result


def best_variant(measured: dict[str, list[float]], variants: list[str]) -> str:
    """Of the named variants of one model, the one with the highest median samples/s."""
    return max(variants, key=lambda v: median(measured[v]))
