"""Accuracy over seeds, the judge of the speed defaults: cpuddp's defaults
and bf16_master against the exact autocast path, and the Trainer at its best.

    .venv/bin/python -m bench.accuracy_seeds [--seeds 42 7 1] [--epochs 3] [--lr 5e-5]
        [--tasks mrpc stsb] [--rows trainer exact bf16_master defaults lora] [--lora-lr 2e-3] [--train-size 1600]
        [--max-steps N] [--json bench/results/accuracy-seeds.json] [--plot PNG] [--fp32]

The seed alone moves dev scores on 400 pairs by several points, so one run
per side says little. Per task shape (bench/accuracy_data.py: `mrpc`, pairs
with 2 labels, scored by F1 of the positive class and accuracy; `stsb`,
pairs with a similarity 0-5, a regression scored by Pearson and Spearman)
and per seed, every row trains with the same learning rate, epochs, seed
and global batch 32 (2 ranks x 1 thread):

- trainer: the Trainer at the bench's best setting (per-batch padding,
  length grouping, fused AdamW; bf16 where the CPU has native bf16);
- exact: cpuddp on transformers' model code (train.model_code
  transformers: cpuddp's own encoder packs tokens and rounds its softmax
  in fp32, which is not exact), train.precision bf16 (autocast over fp32
  weights) where native, else fp32, only the exact step levers
  (levers.exact_only);
- bf16_master: cpuddp, train.precision bf16_master (only where native),
  train.model_code auto (its own encoder for the BERT family);
- defaults: cpuddp, every setting at its default (train.model_code and
  train.precision auto);
- lora (only when asked for in --rows): as exact, with train.lora's
  defaults (rank 8 on query and value, the head in full, merged) at
  --lora-lr (adapters take a larger rate than full fine-tuning).

`--fp32` trains every row in fp32, as a CPU without native bf16 does (AVX2
only): exact is transformers' model code in fp32, defaults cpuddp's in fp32.

Each cpuddp model is scored on dev in fp32 (batches of 64); the Trainer
scores its own. Losses are logged every 5 steps. bench/accuracy_judge.py
prints the table and the verdict per candidate row (bf16_master,
defaults): within one std of exact, and its loss-curve gap. --json gets
every run's scores and loss curve, the CPU, the date and the command
(written after every run); --plot draws the loss curves.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import torch
from transformers import AutoModelForSequenceClassification

from bench import accuracy_judge as judge
from bench.accuracy_data import prepare
from bench.train_bench import MODEL, full_config
from bench.train_bench import run_trainer as bench_trainer
from workflow.scripts.settings import config as cfg
from workflow.scripts.probes import hardware
from workflow.scripts.settings import levers
from workflow.helpers.snakemake_env import prepare_job_environment
from workflow.scripts.data.batching import pad_collate
from workflow.scripts.train.runs import run_training

ROW_KEYS = ("trainer", "exact", "bf16_master", "defaults", "lora")
DEFAULT_ROWS = ROW_KEYS[:4]  # `make bench-accuracy`: lora only when asked for
CANDIDATES = ("bf16_master", "defaults", "lora")
"""The rows judged against `exact`."""


@dataclass(frozen=True)
class Settings:
    """What every run of one invocation shares."""
    epochs: float
    lr: float
    max_steps: int | None
    """Cap on optimizer steps (smoke runs); None trains every epoch."""
    log_every: int
    """Steps between logged losses: 5, or a quarter of max_steps below 20."""
    bf16: bool
    """The CPU has native bf16 (hardware.has_native_bf16)."""
    lora_lr: float = 2e-3
    """The learning rate of the lora row."""

    def __post_init__(self):
        if self.epochs <= 0 or self.lr <= 0 or (self.max_steps is not None and self.max_steps < 1):
            raise SystemExit(f"--epochs {self.epochs}, --lr {self.lr} and --max-steps {self.max_steps} "
                             "must be positive")


def row_names(bf16: bool) -> dict[str, str]:
    return {"trainer": f"Trainer at its best ({'bf16' if bf16 else 'fp32'})",
            "exact": f"cpuddp exact ({'bf16 autocast' if bf16 else 'fp32'})",
            "bf16_master": "cpuddp bf16_master", "defaults": f"cpuddp defaults ({'auto' if bf16 else 'fp32'})",
            "lora": f"cpuddp LoRA r 8 ({'bf16 autocast' if bf16 else 'fp32'}, exact levers)"}


def row_precision(key: str, bf16: bool) -> str:
    return {"exact": "bf16" if bf16 else "fp32", "lora": "bf16" if bf16 else "fp32", "bf16_master": "bf16_master",
            "defaults": "auto" if bf16 else "fp32"}[key]


def cpuddp_config(model: str, task: str, precision: str, s: Settings, seed: int, exact: bool = False,
                  lora: bool = False) -> dict:
    """`exact`: transformers' model code with the levers that change what a
    step computes off (levers.exact_only); `lora`: train.lora's defaults."""
    config = full_config(model, s.max_steps, precision, levers.exact_only().as_dict() if exact else None,
                         model_code="transformers" if exact else "auto")
    config["task"] = task
    config["train"].update(epochs=s.epochs, learning_rate=s.lora_lr if lora else s.lr, seed=seed,
                           log_every=s.log_every, **({"lora": {}} if lora else {}))
    return cfg.validate(config)


def dev_scores(model_dir: Path, data: Path, task: str, batch: int = 64) -> dict:
    """The fine-tuned model's dev scores, in fp32, in padded batches."""
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).float().eval()
    dev = datasets.load_from_disk(str(data))["validation"]
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in dev.column_names]
    collate = pad_collate(model.config.pad_token_id or 0)
    outputs = []
    with torch.inference_mode():
        for start in range(0, len(dev), batch):
            chunk = dev[start:start + batch]
            rows = [dict(zip(keys, values)) for values in zip(*(chunk[k] for k in keys))]
            outputs.append(model(**collate(rows)).logits.float())
    logits = torch.cat(outputs).numpy()
    return judge.scores(task, logits.reshape(-1) if task == "stsb" else logits.argmax(-1), np.array(dev["labels"]))


def run_cpuddp(work: Path, model: str, data: Path, task: str, precision: str, s: Settings, seed: int,
               exact: bool = False, lora: bool = False) -> dict:
    out = work / f"cpuddp-{task}-{precision}-{seed}{'-exact' if exact else ''}{'-lora' if lora else ''}"
    out.mkdir(parents=True)
    info, metrics = run_training(cpuddp_config(model, task, precision, s, seed, exact, lora), str(data), out,
                                 f"cpuddp accuracy run ({task}, precision {precision}, seed {seed})")
    return {"precision": info["precision"], "levers": info.get("levers"), "steps": metrics["steps"],
            "samples_per_second": metrics["train_samples_per_second"], "scores": dev_scores(out / "model", data, task),
            "loss_history": metrics["loss_history"]}


def run_trainer(work: Path, model: str, data: Path, task: str, s: Settings, seed: int) -> dict:
    result = bench_trainer(work, model, data, s.max_steps, s.bf16, False, f"{task}-{seed}", extra=(
        "--epochs", str(s.epochs), "--lr", str(s.lr), "--seed", str(seed), "--task", task,
        "--log-every", str(s.log_every), "--evaluate"))
    if "error" in result:
        raise SystemExit(f"the Trainer failed ({task}, seed {seed}): {result['error']}")
    rank0 = result["rank0"]
    return {"precision": result["precision"], "steps": rank0["steps"],
            "samples_per_second": rank0["train_samples_per_second"],
            "scores": {m: rank0[m] for m in judge.METRICS[task]}, "loss_history": rank0["loss_history"]}


def run_row(key: str, work: Path, model: str, data: Path, task: str, s: Settings, seed: int) -> dict:
    start = time.perf_counter()
    if key == "trainer":
        result = run_trainer(work, model, data, task, s, seed)
    else:
        result = run_cpuddp(work, model, data, task, row_precision(key, s.bf16), s, seed,
                            exact=key in ("exact", "lora"), lora=key == "lora")
    return {**result, "wall_seconds": round(time.perf_counter() - start, 1)}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 7, 1])
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--tasks", nargs="+", choices=list(judge.METRICS), default=list(judge.METRICS))
    parser.add_argument("--rows", nargs="+", choices=ROW_KEYS, default=list(DEFAULT_ROWS))
    parser.add_argument("--lora-lr", type=float, default=2e-3,
                        help="the lora row's learning rate (5e-4 learned nothing in 150 steps)")
    parser.add_argument("--train-size", type=int, default=1600, help="training pairs per task (dev: 400)")
    parser.add_argument("--dev-size", type=int, default=400)
    parser.add_argument("--max-steps", type=int, default=None, help="cap on steps per run (smoke runs)")
    parser.add_argument("--fp32", action="store_true", help="every row in fp32, as on a CPU without native bf16")
    parser.add_argument("--json", type=Path, default=Path("bench/results/accuracy-seeds.json"))
    parser.add_argument("--plot", type=Path, default=None, help="PNG of the loss curves")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    prepare_job_environment(str(Path(__file__).resolve().parents[1]))
    model = cfg.resolve_model(MODEL)
    cpu = hardware.cpu_summary()
    bf16 = hardware.has_native_bf16(cpu["isa_flags"]) and not args.fp32
    log_every = 5 if not args.max_steps or args.max_steps >= 20 else max(1, args.max_steps // 4)
    s = Settings(args.epochs, args.lr, args.max_steps, log_every, bf16, args.lora_lr)
    command = " ".join(["python -m bench.accuracy_seeds", *sys.argv[1:]])
    names = row_names(bf16)
    rows, skipped = [k for k in ROW_KEYS if k in args.rows], {}
    if "bf16_master" in rows and not bf16:
        rows.remove("bf16_master")
        skipped["bf16_master"] = ("--fp32: every row in fp32" if args.fp32 else
                                  "no native bf16 on this CPU (avx512_bf16 or amx_bf16): bf16_master is refused")
        print(f"skipping {names['bf16_master']}: {skipped['bf16_master']}", flush=True)
    print(f"CPU {hardware.cpu_tag(cpu)}; {time.strftime('%Y-%m-%d')}; {command}", flush=True)
    record = {"date": time.strftime("%Y-%m-%d %H:%M"), "command": command, "cpu": cpu, "cpu_tag": hardware.cpu_tag(cpu),
              "native_bf16": bf16, "model": MODEL, "settings": {**vars(s), "seeds": args.seeds,
              "train_size": args.train_size, "dev_size": args.dev_size, "global_batch": 32, "layout": "2 ranks x 1"},
              "rows": {k: names[k] for k in rows}, "skipped": skipped, "runs": []}
    runs = record["runs"]
    with tempfile.TemporaryDirectory(prefix="cpuddp-seeds-") as tmp:
        for task in args.tasks:
            work = Path(tmp) / task
            data = prepare(work, model, task, args.train_size, args.dev_size)
            for seed in args.seeds:
                for key in rows:
                    runs.append({"task": task, "row": names[key], "key": key, "seed": seed,
                                 **run_row(key, work, model, data, task, s, seed)})
                    shown = ", ".join(f"{m} {v:.4f}" for m, v in runs[-1]["scores"].items())
                    print(f"{task} seed {seed}: {names[key]} ({runs[-1]['precision']}): {shown}; "
                          f"{runs[-1]['steps']} steps, {runs[-1]['wall_seconds']:.0f} s", flush=True)
                    write_json(args.json, record)
    summary = judge.summarize(runs)
    judged = judge.verdicts(runs, summary, names["exact"], [names[k] for k in CANDIDATES if k in rows])
    judge.print_table(summary, judged, args.seeds)
    write_json(args.json, {**record, "summary": summary, "verdicts": judged})
    if args.plot:
        judge.plot(runs, [names[k] for k in rows], args.plot, f"{hardware.cpu_tag(cpu)}; {record['date']}; {command}")
        print(f"loss curves: {args.plot}")
    print(f"results: {args.json}")


def write_json(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=float))
    tmp.replace(path)


if __name__ == "__main__":
    main()
