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

import statistics
import time

import torch

from bench.zero_estimate import one_rank_args, one_rank_step
from workflow.scripts.train import master, master_kernel

SHARES = (1.0, 0.4, 0.1, 0.02)


def stepper(model, share: float | None):
    """One bf16_master one-pass update of a copy of `model`'s trainable
    parameters, as a function; the embedding tables' gradients non-zero in
    `share` of their rows (the same rows every step), updated in full when
    share is None."""
    table_ids = {id(t) for t in master.embedding_tables(model)}
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
    args = one_rank_args(__doc__.splitlines()[0], argv, rounds=15)
    if master_kernel.load()[0] is None:
        raise SystemExit(f"the one-pass kernel did not build: {master_kernel.load()[1]}")
    model, step_ms = one_rank_step(args, "bench.optimizer_rows")
    print(f"median of {args.rounds} rounds")
    tables = sum(t.numel() for t in master.embedding_tables(model))
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
