"""Dev accuracy of cpuddp and the Trainer over several seeds (make bench's data).

    .venv/bin/python -m bench.accuracy_seeds [--seeds 42 7 1] [--epochs 3] [--lr 5e-5]

The seed alone moves dev accuracy on 400 pairs by several points, so one
run per side says little. This trains, once per seed, on the bench's
MRPC-shaped pairs (1,600 train, 400 dev; 2 ranks x 1 thread, global batch
32): the Trainer at the bench's best setting (per-batch padding, length
grouping, fused AdamW; bf16 where the CPU has native bf16), cpuddp with
its defaults, and cpuddp with its step levers off, all with the same
learning rate, epochs and seed. Each cpuddp model is scored on the dev
pairs in fp32; the Trainer scores its own. Prints every accuracy and the
means.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import datasets
import torch
from transformers import AutoModelForSequenceClassification

from bench.train_bench import MODEL, full_config, prepare
from bench.train_bench import run_trainer as bench_trainer
from workflow.scripts.common import config as cfg
from workflow.scripts.common import hardware, levers
from workflow.scripts.common.snakemake_env import prepare_job_environment
from workflow.scripts.train.runs import run_training


def accuracy_config(model: str, epochs: float, lr: float, seed: int, speed: dict | None) -> dict:
    config = full_config(model, None, "auto", speed)
    config["train"].update(epochs=epochs, learning_rate=lr, seed=seed, log_every=20)
    return cfg.validate(config)


def dev_accuracy(model_dir: Path, data: Path) -> float:
    """Share of the dev pairs the fine-tuned model labels right (fp32, one pass)."""
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    dev = datasets.load_from_disk(str(data))["validation"]
    right = 0
    with torch.inference_mode():
        for row in dev:
            inputs = {k: torch.tensor([row[k]]) for k in ("input_ids", "attention_mask", "token_type_ids") if k in row}
            right += int(model(**inputs).logits.argmax(-1).item() == row["labels"])
    return right / len(dev)


def run_cpuddp(work: Path, model: str, data: Path, config: dict, tag: str) -> float:
    out = work / tag
    out.mkdir()
    run_training(config, str(data), out, "cpuddp accuracy run")
    return dev_accuracy(out / "model", data)


def run_trainer(work: Path, model: str, data: Path, config: dict, bf16: bool, tag: str) -> float:
    train = config["train"]
    result = bench_trainer(work, model, data, None, bf16, False, tag, extra=(
        "--epochs", str(train["epochs"]), "--lr", str(train["learning_rate"]), "--seed", str(train["seed"])))
    if "error" in result:
        raise SystemExit(f"the Trainer failed: {result['error']}")
    return result["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 7, 1])
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--lr", type=float, default=5e-5)
    args = parser.parse_args()
    prepare_job_environment(str(Path(__file__).resolve().parents[1]))
    model = cfg.resolve_model(MODEL)
    cpu = hardware.cpu_summary()
    bf16 = hardware.has_native_bf16(cpu["isa_flags"])
    print(f"CPU {hardware.cpu_tag(cpu)}; python -m bench.accuracy_seeds {' '.join(sys.argv[1:])}", flush=True)
    rows = {
        f"Trainer ({'bf16' if bf16 else 'fp32'})": lambda w, d, s: run_trainer(
            w, model, d, accuracy_config(model, args.epochs, args.lr, s, None), bf16, f"seed-{s}"),
        "cpuddp (defaults)": lambda w, d, s: run_cpuddp(
            w, model, d, accuracy_config(model, args.epochs, args.lr, s, None), f"auto-{s}"),
        "cpuddp, step levers off": lambda w, d, s: run_cpuddp(
            w, model, d, accuracy_config(model, args.epochs, args.lr, s, levers.all_off().as_dict()), f"off-{s}"),
    }
    accuracy = {name: [] for name in rows}
    with tempfile.TemporaryDirectory(prefix="cpuddp-seeds-") as tmp:
        work = Path(tmp)
        data = prepare(work, model)
        for seed in args.seeds:
            for name, run in rows.items():
                accuracy[name].append(run(work, data, seed))
                print(f"seed {seed}: {name}: {accuracy[name][-1]:.4f}", flush=True)
    print(f"\n{'':26} " + " ".join(f"{'seed ' + str(s):>9}" for s in args.seeds) + f" {'mean':>8}")
    for name, values in accuracy.items():
        print(f"{name:26} " + " ".join(f"{v:9.4f}" for v in values) + f" {statistics.mean(values):8.4f}")


if __name__ == "__main__":
    main()
