"""Ranks versus threads: time short training bursts for each split of a
node's cores (1 x C, 2 x C/2, ...) and keep the fastest layout.

Writes the measured table and the best layout. With --auto (rule
measure_layout, for `distributed.processes_per_node: auto`) it first looks
in the layout cache (settings/layout.py) and bursts only when this CPU
model, core count and run shape have no entry, which it then writes; the
`tune` target measures again (30 steps) and replaces the entry. Each burst (it saves a model) is
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
import time
from pathlib import Path

from workflow.scripts.probes import hardware
from workflow.scripts.common.atomic import read_json, write_json
from workflow.scripts.common.errors import run_cli
from workflow.scripts.settings import layout
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


# Steps of each burst of processes_per_node auto: a few seconds a layout at the real batch.
AUTO_STEPS = 8


def tune(config: dict, data: str, steps: int, keep: Path, cores: int | None = None) -> dict:
    cores = cores or hardware.usable_cores(hardware.cpu_summary())
    table = []
    for ranks, threads in layouts(cores):
        work = Path(tempfile.mkdtemp(prefix=f"burst-{ranks}x{threads}-", dir=keep))
        rate = measure(burst_config(config, ranks, threads, steps), data, work)
        print(f"tune: {ranks} rank(s) x {threads} thread(s): {rate:.2f} samples/s", file=sys.stderr)
        table.append({"processes_per_node": ranks, "threads_per_process": threads,
                      "train_samples_per_second": rate})
    one_rank = next(r for r in table if r["processes_per_node"] == 1)["train_samples_per_second"]
    for row in table:
        row["speedup_vs_one_rank"] = round(row["train_samples_per_second"] / one_rank, 3)
    return {"cores": cores, "steps": steps, "table": table, "best": layout.pick(table)}


def measured_layout(config: dict, data: str, steps: int, keep: Path, folder: Path, fresh: bool = False) -> dict:
    """The layout record of this CPU model, core count and run shape: the
    cache's, else (or when `fresh`) measured now and written to the cache."""
    cpu = hardware.cpu_summary()
    model, cores, shape = cpu["cpu_model"], hardware.usable_cores(cpu), layout.shape(config)
    path = layout.cache_file(folder, model, cores, shape)
    cached = None if fresh else layout.read_cached(path, model, cores, shape)
    if cached is not None:
        return {**cached, "cached": True, "cache_file": str(path)}
    record = {"cpu_model": model, "shape": shape, **tune(config, data, steps, keep, cores),
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cache_file": str(path)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)
    return {**record, "cached": False}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="train configuration JSON")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--steps", type=int, help=f"steps of each burst (30; with --auto {AUTO_STEPS})")
    parser.add_argument("--auto", action="store_true", help="the cached layout when there is one, else measure it")
    parser.add_argument("--cache", help="the layout cache folder (default: settings/layout.cache_dir)")
    parser.add_argument("--out", required=True, help="layout JSON to write")
    args = parser.parse_args(argv)
    config = read_json(args.config)
    scratch = Path(args.out).parent / "bursts"
    scratch.mkdir(parents=True, exist_ok=True)
    for earlier in filter(Path.is_dir, scratch.iterdir()):  # an earlier tuning's: its logs only
        remove_burst(earlier, keep="logs")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # through measure's cleanup
    try:
        steps = args.steps or (AUTO_STEPS if args.auto else 30)
        result = measured_layout(config, args.data, steps, scratch, Path(args.cache or layout.cache_dir()),
                                 fresh=not args.auto)
    finally:
        if not any(scratch.iterdir()):  # a failed burst's logs stay
            scratch.rmdir()
    write_json(args.out, result)
    print(f"tune: {layout.reason(result)}; table in {args.out}")


if __name__ == "__main__":
    run_cli(main)
