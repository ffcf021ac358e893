"""Self-attention on packed tokens: no padded layout, not even for the
scores. Queries are every token, or each sequence's first token alone (the
last layer of a classification model: packed [sequences, hidden] rows).

Two paths, the same arithmetic up to rounding:
- with the hash-dropout kernel, bf16 or fp32 (train/dropout_kernel.c,
  PackedAttention): every sequence and head of a layer in one C call
  forward and one backward, reading the projections' rows where they are
  (cu_seqlens-style offsets, dropout_kernel.Layout); scores, softmax and dropout in
  float, the dropout mask recomputed from a seed in backward. One call
  per torch thread, each a run of whole sequences;
- torch's ops under autograd (where the C kernel did not build, or other dtypes):
  the packed sequences are adjacent by length (packing.Packed), so each run
  of equally long sequences is one batched matmul on views of the packed
  rows, scores [sequences, heads, queries, keys] of that length only."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workflow.scripts.train.dropout_kernel import KernelDropout, Layout, dropped, draw_seed, keep_scale
from workflow.scripts.train.encoder.packing import Packed

def _views(q, k, v, packed: Packed, first_token: bool, heads: int):
    """Per group of equally long sequences: (query rows, queries per sequence, q, k, v as
    [sequences, heads, rows, head_size] views of the packed rows). The rows are cut by split,
    whose backward is one cat (a slice's backward would zero-fill a whole [tokens, hidden]
    gradient per group and add them up)."""
    size = k.shape[-1] // heads
    groups = packed.groups()
    per_seq = [1 if first_token else length for _, _, length in groups]
    q_sizes = [count * rows for (_, count, _), rows in zip(groups, per_seq)]
    kv_sizes = [count * length for _, count, length in groups]
    q_start = 0
    for (_, count, length), rows, qg, kg, vg in zip(groups, per_seq, q.split(q_sizes), k.split(kv_sizes),
                                                     v.split(kv_sizes)):
        yield (slice(q_start, q_start + count * rows), rows,
               qg.view(count, rows, heads, size).transpose(1, 2),
               kg.view(count, length, heads, size).transpose(1, 2),
               vg.view(count, length, heads, size).transpose(1, 2))
        q_start += count * rows


def _merge(context: torch.Tensor) -> torch.Tensor:
    """[sequences, heads, rows, head_size] -> [sequences x rows, hidden]."""
    count, heads, rows, size = context.shape
    return context.transpose(1, 2).reshape(count * rows, heads * size)


def attention(q, k, v, packed: Packed, heads: int, scaling: float, p: float, first_token: bool = False,
              kernel=None) -> torch.Tensor:
    """The context [q's rows, hidden] of packed q [query rows, hidden], k and v [rows, hidden];
    p: the attention dropout (0 outside training). Rows past the packed tokens (bucketed_rows'
    padding; of q, past the queries) take part in no attention: their context is zero, so are
    their gradients. The kernel reads and writes the rows as they are, where slicing the tokens
    out and padding the context again cost a copy each way and a zeroed gradient per slice."""
    if kernel is not None and q.dtype in kernel.attention_entries:
        return PackedAttention.apply(q, k, v, packed, heads, scaling, p, first_token, kernel)
    rows, tokens = q.shape[0], packed.tokens
    q, k, v = q if first_token else q[:tokens], k[:tokens], v[:tokens]
    out = []
    for _, _, qg, kg, vg in _views(q, k, v, packed, first_token, heads):
        scores = torch.matmul(qg, kg.transpose(-1, -2)) * scaling
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        if p > 0:  # the kernel's mask where it built (another dtype than the kernel's attention takes)
            probs = F.dropout(probs, p, training=True) if kernel is None else KernelDropout.apply(probs, p, kernel)
        out.append(_merge(torch.matmul(probs, vg)))
    context = out[0] if len(out) == 1 else torch.cat(out)
    return F.pad(context, (0, 0, 0, rows - context.shape[0])) if rows > context.shape[0] else context


def layout(packed: Packed, first_token: bool, heads: int) -> Layout:
    """The packing's Layout, built once per batch and reused by every layer."""
    threads = torch.get_num_threads()
    key = (first_token, heads, threads)
    if key not in packed.layouts:
        queries = [1] * packed.batch if first_token else packed.lengths
        sizes = [heads * rows * length for rows, length in zip(queries, packed.lengths)]
        probs = [0]
        for size in sizes:
            probs.append(probs[-1] + size)
        query_offsets = list(range(packed.batch + 1)) if first_token else packed.offsets
        offsets = tuple(torch.tensor(o, dtype=torch.int64) for o in (packed.offsets, query_offsets, probs))
        packed.layouts[key] = Layout(offsets, probs[-1], _split(sizes, threads))
    return packed.layouts[key]


def _split(work: list[int], parts: int) -> list[tuple[int, int]]:
    """Consecutive runs of `work` items, at most `parts`, of about equal sums."""
    total, calls, first, done = sum(work), [], 0, 0
    for i, amount in enumerate(work):
        done += amount
        if done * parts >= total * (len(calls) + 1) or i == len(work) - 1:
            calls.append((first, i + 1 - first))
            first = i + 1
    return calls


class PackedAttention(torch.autograd.Function):
    """attention() with the kernel: every sequence and head of a layer in one
    C call forward and one backward (dropout_kernel.c, attention_forward_bf16)."""

    @staticmethod
    def forward(ctx, q, k, v, packed, heads, scaling, p, first_token, kernel):
        seed = draw_seed() if p > 0 else 0
        plan = layout(packed, first_token, heads)
        q, k, v = (t.contiguous() for t in (q, k, v))
        args = (scaling, seed, dropped(p), keep_scale(p))
        out, probs = kernel.attention(q, k, v, plan, heads, *args)
        ctx.save_for_backward(q, k, v, probs)
        ctx.plan, ctx.heads, ctx.kernel, ctx.args = plan, heads, kernel, args
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, probs = ctx.saved_tensors
        dq, dk, dv = ctx.kernel.attention_backward(grad, q, k, v, probs, ctx.plan, ctx.heads, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None
