"""Real workflow runs and the experiments the tests give them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from helpers import forked_snakemake

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def snakemake(workdir: Path, configfile: Path | None = None, *extra: str, check: bool = True,
              timeout: int = 900, umask: int | None = None) -> subprocess.CompletedProcess:
    """Run the real workflow in `workdir` with the local profile (under `umask`, else the forkserver's)."""
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--profile", str(REPO / "profiles" / "local"), "--cores", "2"]
    argv += list(extra)
    if configfile:  # last: --configfile takes every following word as a file
        argv += ["--configfile", str(configfile)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}
    done = forked_snakemake.run(argv, env, timeout, umask)
    if check and done.returncode != 0:
        raise AssertionError(f"snakemake failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}")
    return done


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def tiny_experiment(tmp: Path, model: Path, **train) -> Path:
    """The demo MRPC task (96 training rows) on the tiny model, 2 ranks, 2 epochs."""
    from workflow.scripts.data import demo

    data = tmp / "mrpc"
    demo.write_mrpc_demo(data, n_train=96, n_dev=40, seed=1)
    return write_config(tmp / "tiny.yaml", {
        "experiment": "tiny",
        "task": "mrpc",
        "model": str(model),
        "data": {"format": "glue_tsv", "train": str(data / "train.tsv"), "validation": str(data / "dev.tsv")},
        "train": {"epochs": 2, "batch_size": 8, "learning_rate": 1e-3, "max_seq_length": 64, "log_every": 2,
                  "precision": "fp32", **train},
        "distributed": {"processes_per_node": 2, "threads_per_process": 1},
    })


def task_experiment(task: str, model, files: dict, processes: int = 1) -> dict:
    """One epoch of `task` on the native `files`, as a config dict."""
    from workflow.scripts.common import tasks

    qa = tasks.get_task(task).is_qa
    return {
        "experiment": f"every-{task}", "task": task, "model": str(model), "data": files,
        "train": {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3, "precision": "fp32", "log_every": 1,
                  "max_seq_length": 128 if qa else 64, "doc_stride": 32, "checkpoint_every": 0},
        "distributed": {"processes_per_node": processes, "threads_per_process": 1},
        "evaluation": {"batch_size": 8},
    }
