"""The sweep run (1 then 2 ranks of the tiny model, 3 steps each), made once
per test process and read by the sweep, report and compare tests
(fixture `sweep_run`, tests/integration/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from helpers.workflow import snakemake, tiny_experiment, write_config

EXPERIMENT = "tiny-sweep"
RUNS = ["ppn1", "ppn2"]
_CACHE: dict = {}


def sweep_experiment(tmp: Path, model: Path, **changes) -> Path:
    """The tiny experiment swept over 1 and 2 ranks of one thread, 3 steps each."""
    config = yaml.safe_load(tiny_experiment(tmp, model, epochs=1, max_steps=3, log_every=1).read_text())
    config["experiment"] = EXPERIMENT
    config["sweep"] = {"processes_per_node": [1, 2]}
    config["published"] = {"source": "made-up figures for the tests",
                           "figures": {"ppn2": {"speedup": 1.8, "train_seconds": 1.5}}}
    config.update(changes)
    return write_config(tmp / "sweep.yaml", config)


def sweep_workdir(tmp_path_factory, model: Path) -> tuple[Path, Path]:
    """Run the sweep once per test session; (work folder, experiment file)."""
    if "run" not in _CACHE:
        work = tmp_path_factory.mktemp("sweep")
        configfile = sweep_experiment(work, model)
        snakemake(work, configfile)
        _CACHE["run"] = work, configfile
    return _CACHE["run"]
