"""Communication levers, side by side in one run: DDP bucket size, gradient
compression (fp16, bf16, PowerSGD) and gradient accumulation, on the same
work and seeds, against the defaults.

    .venv/bin/python -m bench.levers_bench [--steps 40] [--accuracy] [--seeds 42]

The packaged MiniLM on pairs with real MRPC token lengths
(bench/train_bench.py's data), fp32 and cpuddp's defaults otherwise, max
length 128, global batch 32 on 2 ranks x 1 thread. Prints per lever the
training samples/s, the all-reduce wait share and, with --accuracy (3
epochs, a few minutes per lever), dev accuracy, with the CPU model and ISA
flags on top: figures from two CPUs never mix.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from pathlib import Path

from bench.train_bench import MODEL, full_config, prepare
from workflow.scripts.settings import config as cfg
from workflow.scripts.probes import hardware
from workflow.helpers.snakemake_env import prepare_job_environment
from workflow.scripts.train.runs import run_training

# name -> (distributed settings, train settings); batch 16 x 2 ranks x 1 = 32
LEVERS = {
    "default (bucket 25 MB, fp32 grads)": ({}, {}),
    "bucket 5 MB": ({"bucket_cap_mb": 5}, {}),
    "bucket 100 MB": ({"bucket_cap_mb": 100}, {}),
    "fp16 compression": ({"gradient_compression": "fp16"}, {}),
    "bf16 compression": ({"gradient_compression": "bf16"}, {}),
    "PowerSGD rank 1": ({"gradient_compression": "powersgd"}, {}),
    "accumulation 2 (batch 8 x 2)": ({}, {"batch_size": 8, "gradient_accumulation_steps": 2}),
}
ISA = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def lever_config(base: dict, dist: dict, train: dict) -> dict:
    config = copy.deepcopy(base)
    config["distributed"].update(dist)
    config["train"].update(train)
    return cfg.validate(config)


def measure(out: Path, data: Path, name: str, config: dict, accuracy: bool) -> dict:
    out.mkdir(parents=True)
    info, metrics = run_training(config, str(data), out, f"levers bench: {name}")
    result = {"samples_per_second": metrics["train_samples_per_second"],
              "wait": metrics["allreduce_wait_share"], "final_loss": metrics["final_loss"]}
    if accuracy:
        from workflow.scripts.infer.evaluate import evaluate
        from workflow.scripts.settings.views import EvaluateView

        ev, _ = evaluate(EvaluateView.pick(config), str(out / "model"), str(data),
                         str(data), info["precision"])
        result["accuracy"] = ev["accuracy"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="steps per run (speed only)")
    parser.add_argument("--accuracy", action="store_true", help="train 3 epochs and report dev accuracy")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42])
    args = parser.parse_args()
    prepare_job_environment(str(Path(__file__).resolve().parents[1]))
    cpu = hardware.cpu_summary()
    flags = " ".join(f for f in ISA if f in cpu["isa_flags"]) or "none of " + " ".join(ISA)
    print(f"CPU: {cpu['cpu_model']}; ISA: {flags}; 2 ranks x 1 thread, global batch 32")
    with tempfile.TemporaryDirectory(prefix="cpuddp-levers-") as tmp:
        work = Path(tmp)
        data = prepare(work, cfg.resolve_model(MODEL))
        steps, epochs = (None, 3) if args.accuracy else (args.steps, 1)
        rows = {}
        for seed in args.seeds:
            base = full_config(cfg.resolve_model(MODEL), steps, "fp32")
            base["train"].update(epochs=epochs, seed=seed)
            for i, (name, (dist, train)) in enumerate(LEVERS.items()):
                out = work / f"seed{seed}-lever{i}"
                rows.setdefault(name, []).append(measure(out, data, name, lever_config(base, dist, train),
                                                         args.accuracy))
    report(rows)


def report(rows: dict) -> None:
    base = sum(r["samples_per_second"] for r in rows[next(iter(rows))]) / len(rows[next(iter(rows))])
    print(f"{'lever':36} {'samples/s':>10} {'vs default':>10} {'wait':>6} {'loss':>7} {'accuracy':>9}")
    for name, results in rows.items():
        speed = sum(r["samples_per_second"] for r in results) / len(results)
        wait = sum(r["wait"] for r in results) / len(results)
        loss = sum(r["final_loss"] for r in results) / len(results)
        acc = (f"{sum(r['accuracy'] for r in results) / len(results):.4f}" if "accuracy" in results[0] else "-")
        print(f"{name:36} {speed:10.1f} {speed / base:9.2f}x {100 * wait:5.1f}% {loss:7.4f} {acc:>9}")


if __name__ == "__main__":
    main()
