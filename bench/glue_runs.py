"""What a user sees: whole training runs, cpuddp's defaults against the
transformers Trainer at its best, on data with real GLUE length
histograms, in paired rounds (`make bench`).

    .venv/bin/python -m bench.glue_runs [--tasks mrpc,sst2] [--rounds 3] [--train-size N] [--fp32] [--isa avx2]

Per task: examples generated to the task's real token lengths under
MiniLM's tokenizer (bench/real_lengths.py: ../shared/data/glue-lengths.json),
the packaged MiniLM, one epoch over all of them, measured from the first
training step to the last as each side reports it (cpuddp's
train_samples_per_second, the Trainer's own). Global batch 32 on MRPC-like
pairs (and STS-B, RTE), 64 on SST-2 (and CoLA) sentences, whatever the
layout: the per-rank batch is the global batch over the ranks.

A round runs, one after the other: the Trainer at its best (bf16 where the
CPU has native bf16 by its flags, else fp32; length-grouped batches,
per-batch padding, its fused AdamW, find_unused_parameters off, gloo) at
2 ranks x 1 thread and at 1 rank x 2 threads, then cpuddp at its defaults
(`processes_per_node: auto` picks the layout for the same global batch,
settings/layout.py). A round's ratio is cpuddp over the Trainer's faster
layout of that round, so a noisy minute touches both sides of one ratio.
It prints every run (cpuddp's with rank 0's update split into phases, and
its fixed cost against its cost per real token: train/step_phases.py), then
per side the median, min and max over rounds, and the ratio's median and
spread; --json writes them. `--fp32` runs both sides in fp32, the precision
a CPU without native bf16 (AVX2 only) trains in, on this CPU's kernels;
`--isa avx2` also holds every library on both sides to AVX2's instructions
(bench/isa.py), in fp32.

The training counts: MRPC's 3,667 pairs (115 steps), SST-2's 67,349
sentences (1,053 steps) unless --train-size cuts them (SST-2's default
here is 16,384: 256 steps, about a minute a run on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench import isa, real_lengths, train_bench
from bench.step_profile import matmul_peak_gflops
from workflow.helpers.snakemake_env import prepare_job_environment
from workflow.scripts.probes import hardware
from workflow.scripts.settings import config as cfg
from workflow.scripts.settings import layout
from workflow.scripts.train import step_phases

GLOBAL_BATCH = {"mrpc": 32, "stsb": 32, "rte": 32, "sst2": 64, "cola": 64}
DEFAULT_SIZE = {"sst2": 16384}  # else the real training count
LAYOUTS = {"2x1": (2, 1), "1x2": (1, 2)}


def train_size(task: str, asked: int | None) -> int:
    return asked or DEFAULT_SIZE.get(task) or real_lengths.table(task)["pairs"]


def trainer_run(work: Path, model: str, data: Path, task: str, bf16: bool, tag: str, layout) -> dict:
    return train_bench.run_trainer(work, model, data, None, bf16, False, tag, layout, task=task,
                                   global_batch=GLOBAL_BATCH[task])


def cpuddp_run(work: Path, model: str, data: Path, task: str, tag: str, precision: str = "auto") -> dict:
    """cpuddp at its defaults: precision and levers its own, and the layout as `processes_per_node: auto`
    picks it for this global batch (train/tune.py's bursts, measured in the first round into this bench's
    own layout cache, read from it after), split as the workflow's environment check splits it."""
    from workflow.scripts.train import tune
    from workflow.scripts.train.runs import run_training

    config = train_bench.full_config(model, None, precision, task=task, layout=(1, 2), global_batch=GLOBAL_BATCH[task],
                                     epochs=1)
    config["distributed"].update(processes_per_node="auto", threads_per_process="auto")
    bursts = work / f"bursts-{tag}"
    bursts.mkdir()
    record = tune.measured_layout(config, str(data), tune.AUTO_STEPS, bursts, work.parent / "layout-cache")
    best = record["best"]
    config["distributed"].update(processes_per_node=best["processes_per_node"],
                                 threads_per_process=best["threads_per_process"])
    config["train"].update(batch_size=best["batch_size"],
                           gradient_accumulation_steps=best["gradient_accumulation_steps"])
    out = work / f"cpuddp-{tag}"
    out.mkdir()
    info, metrics = run_training(cfg.validate(config), str(data), out, "cpuddp bench run")
    return {"sps": metrics["train_samples_per_second"], "precision": info["precision"],
            "layout": f"{best['processes_per_node']}x{best['threads_per_process']}",
            "global_batch": metrics["global_batch"], "steps": metrics["steps"],
            "allreduce_wait_share": metrics.get("allreduce_wait_share"),
            "step_phases": metrics["ranks"][0].get("step_phases", {"updates": 0}),
            "layout_reason": layout.reason(record)}


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def run_task(work: Path, model: str, task: str, rounds: int, size: int | None, bf16: bool, peak: float,
             precision: str = "auto") -> dict:
    n = train_size(task, size)
    data = train_bench.prepare(work, model, n_train=n, n_dev=256, task=task)
    print(f"{real_lengths.FILE_KEYS[task]}: {n} examples, {train_bench.length_summary(data)}; global batch "
          f"{GLOBAL_BATCH[task]}; one epoch", flush=True)
    rows = []
    for i in range(rounds):
        trainer = {tag: trainer_run(work, model, data, task, bf16, f"r{i}-{tag}", layout)
                   for tag, layout in LAYOUTS.items()}
        ours = cpuddp_run(work, model, data, task, f"r{i}", precision)
        if i == 0:
            print(f"  layout: {ours['layout_reason']}", flush=True)
        best = max(trainer, key=lambda t: trainer[t].get("sps", 0.0))
        ratio = ours["sps"] / max(trainer[best].get("sps", 0.0), 1e-9)
        rows.append({"trainer": {t: r.get("sps") for t, r in trainer.items()}, "cpuddp": ours, "ratio": ratio})
        print(f"  round {i + 1}: Trainer 2x1 {trainer['2x1'].get('sps', 0):.1f}, 1x2 {trainer['1x2'].get('sps', 0):.1f}"
              f" samples/s; cpuddp {ours['sps']:.1f} ({ours['layout']}, {ours['precision']}, global batch "
              f"{ours['global_batch']}, {ours['steps']} steps): {ratio:.2f}x the Trainer's faster ({best})",
              flush=True)
        if ours["step_phases"].get("updates"):
            print(f"    cpuddp's rank 0 in that run: {step_phases.describe(ours['step_phases'])}", flush=True)
    best_trainer = [max(v for v in r["trainer"].values() if v) for r in rows]
    ratios = [r["ratio"] for r in rows]
    useful = train_bench.useful_flops_per_sample(model, data) * statistics.median(r["cpuddp"]["sps"] for r in rows)
    print(f"  useful work of cpuddp (6 x non-embedding parameters x real tokens, plus attention): "
          f"{useful / 1e9:.0f} GFLOP/s, {100 * useful / 1e9 / (2 * peak):.0f}% of two cores' matmul peak "
          f"({peak:.0f} GFLOP/s a core, measured in this run)", flush=True)
    print(f"  over {rounds} rounds: Trainer at its best {spread(best_trainer)}; cpuddp "
          f"{spread([r['cpuddp']['sps'] for r in rows])} samples/s; ratio {spread(ratios)}x", flush=True)
    return {"examples": n, "global_batch": GLOBAL_BATCH[task], "rounds": rows, "useful_gflops": useful / 1e9,
            "peak_gflops_per_core": peak,
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="mrpc,sst2", help=f"comma-separated, of {', '.join(GLOBAL_BATCH)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=None, help="examples per task (default: the real count; "
                                                                     "SST-2 16,384)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--fp32", action="store_true", help="both sides in fp32, as on a CPU without native bf16 "
                                                            "(an AVX2-only CPU's precision; this CPU's kernels)")
    parser.add_argument("--isa", choices=sorted(isa.LIMITS), default=None,
                        help="hold both sides to this ISA (bench/isa.py): avx2, an AVX2-only CPU's instructions")
    args = parser.parse_args()
    isa.reexec_held_to(args.isa, "bench.glue_runs")
    prepare_job_environment(str(Path(__file__).resolve().parents[1]))
    cpu = hardware.cpu_summary()
    bf16 = hardware.has_native_bf16(cpu["isa_flags"]) and not args.fp32 and not args.isa  # AVX2 has no bf16
    print(f"CPU {hardware.cpu_tag(cpu)}; {time.strftime('%Y-%m-%d %H:%M')}; python -m bench.glue_runs "
          f"{' '.join(sys.argv[1:])}; the Trainer in {'bf16' if bf16 else 'fp32'}", flush=True)
    if held := isa.describe():
        print(held, flush=True)
    model = cfg.resolve_model(train_bench.MODEL)
    from transformers import AutoConfig

    shape = AutoConfig.from_pretrained(model)
    peak = matmul_peak_gflops(shape.hidden_size, shape.intermediate_size, torch.bfloat16 if bf16 else torch.float32)
    print(f"one-thread {'bf16' if bf16 else 'fp32'} matmul peak at MiniLM's FFN shape: {peak:.0f} GFLOP/s", flush=True)
    results = {"cpu": hardware.cpu_tag(cpu), "tasks": {}}
    with tempfile.TemporaryDirectory(prefix="cpuddp-glue-runs-") as tmp:
        for task in args.tasks.split(","):
            results["tasks"][task] = run_task(Path(tmp) / task, model, task, args.rounds, args.train_size, bf16, peak,
                                              "fp32" if args.fp32 or args.isa else "auto")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
