"""A one-node step profile with round numbers, for the plan's tests."""

from __future__ import annotations

from workflow.scripts.plan.scaling_model import MB, Profile


def profile(**changes) -> Profile:
    """1 s forward, 2 s backward, 0.5 s update; 100 MB of gradients ready
    evenly over backward, the last 40 MB (embeddings) at its very end."""
    grads = [[6 * MB, 0.2 * (i + 1)] for i in range(10)] + [[40 * MB, 2.0]]
    base = {"batch_size": 32, "forward": 1.0, "backward": 2.0, "update": 0.5, "grads": grads,
            "compress_seconds_per_byte": {"fp16": 1e-10, "bf16": 1e-10, "powersgd": 1e-9}, "powersgd_ratio": 0.01}
    return Profile(**{**base, **changes})
