"""Ranks versus threads: time short training bursts for each split of a
node's cores (1 x C, 2 x C/2, ...) and keep the fastest layout.

Every layout trains the same global batch (settings/layout.split_batch: the
reference batch x accumulation, split into its ranks), so every burst
trains the same global batches of the same seed: the same token lengths,
the same work. A burst is its epoch's first loop.WARMUP_STEPS updates, then
`steps` updates sampled across the epoch's lengths (train.sample_updates:
one at each of `steps` evenly spaced quantiles of their real tokens), timed
after the warm-up (train_metrics.json's steady_samples_per_second): what a
whole epoch runs at, not what its first batches happen to.
A layout whose memory estimate exceeds what is available
(train/layout_memory.py), or whose burst fails, is dropped with a line;
when none is left the run takes layout.fallback, one rank of every core.

Writes the measured table and the best layout. With --auto (rule
measure_layout, for `distributed.processes_per_node: auto`) it first looks
in the layout cache (settings/layout.py) and bursts only when this CPU
model, core count and run shape have no entry, which it then writes (not a
fallback: nothing was measured); the `tune` target measures again
(TUNE_STEPS sampled updates) and replaces the entry. Each burst (it saves a model) is
deleted as soon as it is measured, whatever the outcome; a failed one keeps
only its rank logs, which its line names. A SIGTERM between bursts ends
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

import psutil

from workflow.scripts.probes import hardware
from workflow.scripts.common.atomic import follow_umask, read_json, write_json
from workflow.scripts.common.errors import first_line, run_cli
from workflow.scripts.data.arrow_split import ArrowSplit
from workflow.scripts.settings import layout
from workflow.scripts.train import layout_memory
from workflow.scripts.train.loop import WARMUP_STEPS
from workflow.scripts.train.runs import run_training


def burst_config(config: dict, row: dict, steps: int) -> dict:
    """The run's configuration as a burst of `row`'s layout and split of the
    global batch: one epoch of WARMUP_STEPS + `steps` sampled updates."""
    burst = copy.deepcopy(config)
    burst["distributed"].update(nodes=1, hostfile=None, processes_per_node=row["processes_per_node"],
                                threads_per_process=row["threads_per_process"])
    burst["train"].update(batch_size=row["batch_size"], gradient_accumulation_steps=row["gradient_accumulation_steps"],
                          sample_updates=steps, max_steps=None, epochs=1, checkpoint_every=0,
                          log_every=max(1, (WARMUP_STEPS + steps) // 2))
    return burst


def measure(config: dict, data: str, work: Path) -> tuple[float | None, str | None]:
    """(samples/s after the warm-up, None) of one short run in `work`,
    deleted after it; a failed run: (None, its error), its logs kept. A stop
    (SIGTERM, Ctrl-C) is no failure of the layout: it ends the tuning."""
    try:
        metrics = run_training(config, data, work, "tuning burst")[1]
    except Exception as err:  # any failure of one layout drops that layout only
        remove_burst(work, keep="logs")
        return None, first_line(err)
    except BaseException:
        remove_burst(work, keep="logs")
        raise
    remove_burst(work)
    return metrics.get("steady_samples_per_second") or metrics["train_samples_per_second"], None


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


# Timed updates of each burst of processes_per_node auto (after WARMUP_STEPS),
# sampled across the epoch's lengths. The epoch's first batches are a random
# draw: on SST-2's lengths their bursts read 320-370 samples/s where whole
# runs went 270-314; the sampled bursts read 2-8% above whole runs (AMD EPYC
# Zen 4, 2 cores; bench/results/2026-12-06-epyc-zen4-auto-sampled-bursts.txt).
# 12 sampled updates still spread 274-313 at 1 x 2; 24 cost about 5 s a
# layout at SST-2's lengths, 10 s at MRPC's, once per CPU model and shape.
AUTO_STEPS = 24
# The `tune` target's, which a user runs to measure a layout again: twice as many.
TUNE_STEPS = 2 * AUTO_STEPS


def say(line: str) -> None:
    print(f"tune: {line}", file=sys.stderr, flush=True)


def timed(config: dict, data: str, steps: int, keep: Path, rows: list[dict], dropped: list[str]) -> list[dict]:
    """The rows measured, each with its burst's samples/s; a failed burst's
    layout is dropped with a line (into `dropped`)."""
    table = []
    for row in rows:
        work = Path(tempfile.mkdtemp(prefix=f"burst-{layout.split(row).replace(' ', '')}-", dir=keep))
        follow_umask(work)  # mkdtemp's 0700: a failed burst's logs stay for the team to read
        rate, error = measure(burst_config(config, row, steps), data, work)
        if rate is None:
            dropped.append(f"{layout.split(row)}: its burst failed ({error}); dropped")
            say(dropped[-1])
            continue
        say(f"{row['processes_per_node']} rank(s) x {row['threads_per_process']} thread(s), batch "
            f"{row['batch_size']} x accumulation {row['gradient_accumulation_steps']}: {rate:.2f} samples/s "
            f"over {steps} updates sampled across the epoch's lengths, after {WARMUP_STEPS} warm-up updates")
        table.append({**row, "train_samples_per_second": round(rate, 3)})
    return table


def fitting(config: dict, rows: list[dict], dropped: list[str]) -> list[dict]:
    """The rows whose memory estimate fits in what this node has available now."""
    available, kept = psutil.virtual_memory().available, []
    for row in rows:
        why = layout_memory.too_big(Path(str(config["model"])), row, config["train"]["max_seq_length"], available)
        if why:
            dropped.append(why)
            say(why)
        else:
            kept.append(row)
    return kept


def tune(config: dict, data: str, steps: int, keep: Path, cores: int | None = None) -> dict:
    cores = cores or hardware.usable_cores(hardware.cpu_summary())
    batch, accumulation = config["train"]["batch_size"], config["train"].get("gradient_accumulation_steps") or 1
    rows, dropped = layout.candidates(cores, batch, accumulation)
    for line in dropped:
        say(line)
    table = timed(config, data, steps, keep, fitting(config, rows, dropped), dropped)
    one_rank = next((r["train_samples_per_second"] for r in table if r["processes_per_node"] == 1), None)
    for row in table if one_rank else []:
        row["speedup_vs_one_rank"] = round(row["train_samples_per_second"] / one_rank, 3)
    if not table:
        say(f"no layout could be measured: the fallback, {layout.REFERENCE_RANKS} rank(s) x all {cores} cores")
    return {"cores": cores, "warmup_steps": WARMUP_STEPS, "steps": steps, "timing": layout.TIMING,
            "table": table, "dropped": dropped,
            "best": layout.pick(table) if table else layout.fallback(cores, batch, accumulation),
            "fallback": not table}


def measured_layout(config: dict, data: str, steps: int, keep: Path, folder: Path, fresh: bool = False) -> dict:
    """The layout record of this CPU model, core count and run shape: the
    cache's, else (or when `fresh`) measured now and written to the cache
    (a fallback is not: nothing was measured, the next run bursts again)."""
    cpu, lengths = hardware.cpu_summary(), ArrowSplit.load(data, "train").lengths()
    # The training split's token lengths: their profile is part of the cache key.
    model, cores = cpu["cpu_model"], hardware.usable_cores(cpu)
    shape = layout.shape(config, layout.length_profile(lengths))
    path = layout.cache_file(folder, model, cores, shape)
    cached = None if fresh else layout.read_cached(path, model, cores, shape)
    if cached is not None:
        return {**cached, "cached": True, "cache_file": str(path)}
    record = {"cpu_model": model, "shape": shape, **tune(config, data, steps, keep, cores),
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cache_file": str(path)}
    if record["fallback"]:
        return {**record, "cached": False, "cache_file": None}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)
    return {**record, "cached": False}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="train configuration JSON")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--steps", type=int, help=f"timed steps of each burst, after {WARMUP_STEPS} warm-up "
                                                  f"steps ({TUNE_STEPS}; with --auto {AUTO_STEPS})")
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
        steps = args.steps or (AUTO_STEPS if args.auto else TUNE_STEPS)
        result = measured_layout(config, args.data, steps, scratch, Path(args.cache or layout.cache_dir()),
                                 fresh=not args.auto)
    finally:
        if not any(scratch.iterdir()):  # a failed burst's logs stay
            scratch.rmdir()
    write_json(args.out, result)
    print(f"tune: {layout.reason(result)}; table in {args.out}")


if __name__ == "__main__":
    run_cli(main)
