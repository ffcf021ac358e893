"""The embedding_grad lever (train.speed.embedding_grad `reuse`,
train/speed.py; cpuddp's encoder takes it when it is built, encoder/layers.py
Embeddings): the word embedding's gradient written into a table kept
from step to step, zeroing only the rows the last step touched, instead of
a new zeroed table every step (a table over 32 MB comes from fresh pages of
the OS each time). The gradient is torch's, bit for bit; the rows it wrote
also tell the row all-reduce (comm.py) which rows this rank touched."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class GradPool:
    """The reused gradient table and the rows written into it since it was
    last handed out (only those can be non-zero)."""

    def __init__(self):
        self.table: torch.Tensor | None = None
        self.rows: list[torch.Tensor] = []
        self.complete = False  # rows holds every row of the gradient the step holds
        self.reduced: torch.Tensor | None = None  # the all-reduced rows of the adopted table (rows_of)

    def adopt(self, view: torch.Tensor, rows: torch.Tensor) -> None:
        """Write the next step's gradient into `view`, the table's view in
        DDP's bucket, all-reduced and non-zero in `rows` alone
        (grad_buckets direct, train/bucket_grads.py): DDP copies no table
        into its bucket then."""
        self.table, self.rows, self.complete = view, [rows], False
        self.reduced = rows

    def rows_of(self, grad: torch.Tensor) -> torch.Tensor | None:
        """The rows `grad` can be non-zero in, where it is the table adopt()
        was given since the last backward (the all-reduced gradient); else None."""
        table = self.table if self.reduced is not None else None
        if table is None or grad.data_ptr() != table.data_ptr() or grad.shape != table.shape:
            return None
        return self.reduced

    def touched_rows(self) -> torch.Tensor | None:
        """The rows this step's gradient can be non-zero in (sorted), or
        None when this pool did not see all of it."""
        return torch.cat(self.rows).unique() if self.complete and self.rows else None

    def gradient(self, weight: torch.Tensor, ids: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """embedding_dense_backward's result: each row the sum, in token
        order, of its tokens' gradients (padding skipped by the caller)."""
        shape = (weight.shape[0], grad.shape[-1])
        self.reduced = None  # a new backward: the table is no longer the reduced one
        if weight.grad is not None:  # accumulating into what the step holds: a new table, as torch does
            if self.table is not None and weight.grad.data_ptr() == self.table.data_ptr():
                self.rows.append(ids)  # autograd adds it into our table
            else:
                self.complete = False
            return grad.new_zeros(shape).index_add_(0, ids, grad)
        if self.table is None or self.table.shape != shape or self.table.dtype != grad.dtype:
            self.table, self.rows = grad.new_zeros(shape), []
        elif self.rows:
            self.table.index_fill_(0, torch.cat(self.rows), 0)
        self.rows, self.complete = [ids], True
        # A new view: autograd takes a gradient with no other reference as
        # the parameter's .grad instead of copying it.
        return self.table.index_add_(0, ids, grad).view(shape)


class _ReusedGradEmbedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, weight, padding_idx, pool: GradPool):
        ctx.save_for_backward(ids, weight)
        ctx.padding_idx, ctx.pool = padding_idx, pool
        return F.embedding(ids, weight, padding_idx)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[1]:
            return None, None, None, None
        ids, weight = ctx.saved_tensors
        ids, grad = ids.reshape(-1), grad.reshape(-1, grad.shape[-1])
        if ctx.padding_idx is not None:
            keep = ids != ctx.padding_idx
            ids, grad = ids[keep], grad[keep]
        return None, ctx.pool.gradient(weight, ids, grad), None, None
