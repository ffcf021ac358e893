"""Does `processes_per_node: auto` time what a whole run does? Its bursts
against whole runs, layout by layout, on data with real GLUE lengths.

    .venv/bin/python -m bench.auto_bursts [--task sst2] [--train-size 16384] [--rounds 2] [--updates 24]

Per round and candidate layout (settings/layout.py's candidates for this
node's cores, each at its split of the one global batch), one after the
other:
- a burst as auto times it (train/tune.py burst_config: the warm-up, then
  `--updates` updates sampled across the epoch's real token counts), its
  samples/s after the warm-up;
- a burst of the epoch's first updates (the warm-up and as many updates
  again, no sampling): what bursts timed before `train.sample_updates`;
- a whole one-epoch run at that layout, its samples/s from the first step
  (train_samples_per_second, what a user's run reports) and after the
  warm-up.
The layouts' order alternates between rounds. Then, per kind of burst, each
reading over the whole run's of the same round and layout (1.00: the burst
reads what the run does), and which layout each kind would pick against
the one the whole runs were fastest at.

Examples, model and global batch as `make bench` has them (bench/glue_runs.py:
the packaged MiniLM, 32 on MRPC's lengths, 64 on SST-2's). Run it alone on
an idle machine: every reading is one process at a time on all cores.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench import glue_runs, real_lengths, train_bench
from workflow.helpers.snakemake_env import prepare_job_environment
from workflow.scripts.probes import hardware
from workflow.scripts.settings import config as cfg
from workflow.scripts.settings import layout
from workflow.scripts.train import tune
from workflow.scripts.train.loop import WARMUP_STEPS
from workflow.scripts.train.runs import run_training

KINDS = ("sampled burst", "first-batches burst", "whole run")


def at_layout(base: dict, row: dict) -> dict:
    """The whole run of `base` at candidate `row`'s ranks, threads and split of the global batch."""
    config = copy.deepcopy(base)
    config["distributed"].update(processes_per_node=row["processes_per_node"],
                                 threads_per_process=row["threads_per_process"])
    config["train"].update(batch_size=row["batch_size"],
                           gradient_accumulation_steps=row["gradient_accumulation_steps"])
    return config


def first_batches(base: dict, row: dict, updates: int) -> dict:
    """A burst of the epoch's first WARMUP_STEPS + `updates` updates, unsampled."""
    config = tune.burst_config(base, row, updates)
    config["train"].update(sample_updates=None, max_steps=WARMUP_STEPS + updates)
    return config


def samples_per_second(config: dict, data: Path, work: Path, name: str) -> tuple[float, float]:
    """(after the warm-up, from the first step) of one run; its folder removed."""
    out = work / name
    out.mkdir()
    try:
        metrics = run_training(cfg.validate(config), str(data), out, name)[1]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    whole = metrics["train_samples_per_second"]
    return metrics.get("steady_samples_per_second") or whole, whole


def one_round(base: dict, rows: list[dict], data: Path, work: Path, updates: int, number: int) -> dict:
    """{layout: {kind: samples/s}} of one round, the layouts in `rows`' order."""
    readings = {}
    for row in rows:
        tag = layout.split(row)
        sampled = samples_per_second(tune.burst_config(base, row, updates), data, work, f"r{number}-sampled")[0]
        first = samples_per_second(first_batches(base, row, updates), data, work, f"r{number}-first")[0]
        steady, whole = samples_per_second(at_layout(base, row), data, work, f"r{number}-whole")
        readings[tag] = dict(zip(KINDS, (sampled, first, whole)))
        print(f"  round {number + 1}, {tag}: sampled burst {sampled:.1f}, first-batches burst {first:.1f}, "
              f"whole run {whole:.1f} ({steady:.1f} after the warm-up) samples/s", flush=True)
    return readings


def summary(rounds: list[dict]) -> list[str]:
    """Per kind of burst: its readings over the whole runs', and the layouts it picks."""
    fastest = [max(r, key=lambda tag: r[tag]["whole run"]) for r in rounds]
    lines = [f"whole runs fastest at: {', '.join(fastest)} (round by round)"]
    for kind in KINDS[:2]:
        ratios = [r[tag][kind] / r[tag]["whole run"] for r in rounds for tag in r]
        picks = [max(r, key=lambda tag: r[tag][kind]) for r in rounds]
        agree = sum(p == f for p, f in zip(picks, fastest))
        lines.append(f"{kind}: reads {statistics.median(ratios):.2f}x the whole run (median; "
                     f"{min(ratios):.2f}-{max(ratios):.2f}); picks {', '.join(picks)}: the whole runs' "
                     f"fastest in {agree} of {len(rounds)} rounds")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="sst2", choices=sorted(glue_runs.GLOBAL_BATCH))
    parser.add_argument("--train-size", type=int, help="examples (default: bench/glue_runs.py's for the task)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--updates", type=int, default=tune.AUTO_STEPS, help="sampled updates a burst times")
    args = parser.parse_args(argv)
    prepare_job_environment(str(Path(__file__).resolve().parents[1]))
    cpu, size = hardware.cpu_summary(), glue_runs.train_size(args.task, args.train_size)
    cores = hardware.usable_cores(cpu)
    print(f"CPU {hardware.cpu_tag(cpu)}; {time.strftime('%Y-%m-%d %H:%M')}; python -m bench.auto_bursts --task "
          f"{args.task} --train-size {size} --rounds {args.rounds} --updates {args.updates}", flush=True)
    model = cfg.resolve_model(train_bench.MODEL)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        data = train_bench.prepare(work / "data", model, n_train=size, n_dev=256, task=args.task)
        base = train_bench.full_config(model, None, "auto", task=args.task, layout=(1, cores),
                                       global_batch=glue_runs.GLOBAL_BATCH[args.task], epochs=1)
        rows, _ = layout.candidates(cores, base["train"]["batch_size"],
                                    base["train"]["gradient_accumulation_steps"] or 1)
        print(f"{real_lengths.FILE_KEYS[args.task]}: {size} examples, {train_bench.length_summary(data)}; global "
              f"batch {glue_runs.GLOBAL_BATCH[args.task]}; layouts {', '.join(layout.split(r) for r in rows)}",
              flush=True)
        rounds = [one_round(base, rows if i % 2 == 0 else rows[::-1], data, work, args.updates, i)
                  for i in range(args.rounds)]
    for line in summary(rounds):
        print(line)


if __name__ == "__main__":
    main()
