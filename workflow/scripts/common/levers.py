"""Which levers of the training step (workflow/scripts/train/speed.py) a run
uses: `auto` follows the rules stated there and in docs/performance.md; the
environment check records the choice and why in environment.json."""

from __future__ import annotations


def choose(dropout: str = "auto", attention: str = "auto") -> dict:
    """The levers and why (rules, not measurements: docs/performance.md has the figures)."""
    picked = {"dropout": "fast" if dropout == "auto" else dropout,
              "attention": "eager" if attention == "auto" else attention}
    reasons = {
        "dropout": "auto: 32-bit draws are faster than bernoulli_ on every CPU measured" if dropout == "auto"
        else "set in train.speed",
        "attention": "auto: with attention dropout the CPU sdpa kernel falls back to math; eager is faster"
        if attention == "auto" else "set in train.speed",
    }
    return {"speed": picked, "speed_reason": reasons}
