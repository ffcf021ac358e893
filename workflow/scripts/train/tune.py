"""Ranks versus threads: time short training bursts for each split of a
node's cores (1 x C, 2 x C/2, ...) and keep the fastest layout.

Writes the measured table and the best layout; an experiment uses it with
`distributed.threads_per_process: tuned`. Each burst (it saves a model) is
deleted as soon as it is measured, whatever the outcome; a failed one keeps
only its rank logs, which its error names. A SIGTERM between bursts ends
tuning the same way (one during a burst stops the burst's ranks first).
"""

from __future__ import annotations

import argparse
import copy
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from workflow.scripts.probes import hardware
from workflow.scripts.common.atomic import read_json, write_json
from workflow.scripts.common.errors import run_cli
from workflow.scripts.train.runs import run_training


def layouts(cores: int) -> list[tuple[int, int]]:
    """(ranks, threads per rank) for every rank count that divides the cores."""
    return [(ranks, cores // ranks) for ranks in range(1, cores + 1) if cores % ranks == 0]


def burst_config(config: dict, ranks: int, threads: int, steps: int) -> dict:
    burst = copy.deepcopy(config)
    burst["distributed"].update(nodes=1, hostfile=None, processes_per_node=ranks, threads_per_process=threads)
    burst["train"].update(max_steps=steps, checkpoint_every=0, log_every=max(1, steps // 2))
    return burst


def measure(config: dict, data: str, work: Path) -> float:
    """Training samples/s of one short run in `work`, deleted after it (a
    failed run's logs kept)."""
    try:
        rate = run_training(config, data, work, "tuning burst")[1]["train_samples_per_second"]
    except BaseException:
        remove_burst(work, keep="logs")
        raise
    remove_burst(work)
    return rate


def remove_burst(work: Path, keep: str | None = None) -> None:
    """Delete a burst's folder, or everything in it but `keep`."""
    if keep is None or not (work / keep).is_dir():
        shutil.rmtree(work, ignore_errors=True)
        return
    for path in work.iterdir():
        if path.name == keep:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


def tune(config: dict, data: str, steps: int, keep: Path) -> dict:
    cores = hardware.usable_cores(hardware.cpu_summary())
    table = []
    for ranks, threads in layouts(cores):
        work = Path(tempfile.mkdtemp(prefix=f"burst-{ranks}x{threads}-", dir=keep))
        rate = measure(burst_config(config, ranks, threads, steps), data, work)
        print(f"tune: {ranks} rank(s) x {threads} thread(s): {rate:.2f} samples/s", file=sys.stderr)
        table.append({"processes_per_node": ranks, "threads_per_process": threads,
                      "train_samples_per_second": rate})
    best = max(table, key=lambda row: row["train_samples_per_second"])
    one_rank = next(r for r in table if r["processes_per_node"] == 1)["train_samples_per_second"]
    for row in table:
        row["speedup_vs_one_rank"] = round(row["train_samples_per_second"] / one_rank, 3)
    return {"cores": cores, "steps": steps, "table": table,
            "best": {k: best[k] for k in ("processes_per_node", "threads_per_process")}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="train configuration JSON")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", required=True, help="layout JSON to write")
    args = parser.parse_args(argv)
    config = read_json(args.config)
    scratch = Path(args.out).parent / "bursts"
    scratch.mkdir(parents=True, exist_ok=True)
    for earlier in filter(Path.is_dir, scratch.iterdir()):  # an earlier tuning's: its logs only
        remove_burst(earlier, keep="logs")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # through measure's cleanup
    try:
        result = tune(config, args.data, args.steps, scratch)
    finally:
        if not any(scratch.iterdir()):  # a failed burst's logs stay
            scratch.rmdir()
    write_json(args.out, result)
    print(f"tune: best layout {result['best']}; table in {args.out}")


if __name__ == "__main__":
    run_cli(main)
