"""A training long enough to be interrupted, and the digest of its weights:
shared by the fault-tolerance and self-healing tests."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from helpers.workflow import tiny_experiment, write_config

RUN = Path("results/tiny/default")


def long_experiment(work: Path, model: Path, retries: int = 0, **dist) -> Path:
    """About 200 steps of the tiny model, a checkpoint every 20; `retries`:
    how often the workflow retries the training by itself."""
    configfile = tiny_experiment(work, model, epochs=10, checkpoint_every=20)
    config = yaml.safe_load(configfile.read_text())
    config["distributed"].update(retries=retries, **dist)
    from workflow.scripts.data import demo

    demo.write_mrpc_demo(work / "mrpc", n_train=320, n_dev=40, seed=1)
    return write_config(configfile, config)


def digest(work: Path) -> str:
    ranks = json.loads((work / RUN / "train_metrics.json").read_text())["ranks"]
    assert len({r["weights_sha256"] for r in ranks}) == 1
    return ranks[0]["weights_sha256"]
