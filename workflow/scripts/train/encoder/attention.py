"""Self-attention on packed tokens: no padded layout, not even for the
scores. The packed sequences are adjacent by length (packing.Packed), so
each run of equally long sequences is one batched matmul on views of the
packed rows: scores [sequences, heads, queries, keys] of that length only.

Queries are every token, or each sequence's first token alone (the last
layer of a classification model: packed [sequences, hidden] rows).

Two paths, the same arithmetic up to rounding:
- torch's ops under autograd (fp32, or where the C kernel did not build;
  the dropout from the kernel where it built);
- with the hash-dropout kernel on bf16 (train/dropout_kernel.c): the scale,
  softmax (in fp32, rounded once) and dropout in one pass forward and one
  backward, the dropout mask recomputed from a seed; the whole attention of
  a layer is one autograd node (SegmentAttention), whose backward loops over
  the same groups."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workflow.scripts.train.dropout_kernel import KernelDropout, dropped, draw_seed, keep_scale
from workflow.scripts.train.encoder.packing import Packed

GOLDEN = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1


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
    """The context [query rows, hidden] of packed q [query rows, hidden], k and v [tokens, hidden];
    p: the attention dropout (0 outside training)."""
    if kernel is not None and q.dtype == torch.bfloat16:
        return SegmentAttention.apply(q, k, v, packed, heads, scaling, p, first_token, kernel)
    out = []
    for _, _, qg, kg, vg in _views(q, k, v, packed, first_token, heads):
        scores = torch.matmul(qg, kg.transpose(-1, -2)) * scaling
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        if p > 0:  # the kernel's mask where it built (fp32: its softmax pass is bf16's only)
            probs = F.dropout(probs, p, training=True) if kernel is None else KernelDropout.apply(probs, p, kernel)
        out.append(_merge(torch.matmul(probs, vg)))
    return out[0] if len(out) == 1 else torch.cat(out)


def _group_seed(seed: int, group: int) -> int:
    return (seed + (group + 1) * GOLDEN) & MASK64


class SegmentAttention(torch.autograd.Function):
    """attention() with the kernel's softmax and dropout: one node per layer."""

    @staticmethod
    def forward(ctx, q, k, v, packed, heads, scaling, p, first_token, kernel):
        seed = draw_seed() if p > 0 else 0
        args = (dropped(p), keep_scale(p))
        out, saved = torch.empty_like(q), []
        for g, (q_rows, per_seq, qg, kg, vg) in enumerate(_views(q, k, v, packed, first_token, heads)):
            scores = torch.matmul(qg, kg.transpose(-1, -2)).contiguous()
            mask = scores.new_zeros((scores.shape[0], 1, scores.shape[-1]), dtype=torch.float32)
            kept, probs = kernel.softmax_dropout(scores, mask, scaling, _group_seed(seed, g), *args)
            out[q_rows].view(qg.shape[0], per_seq, heads, -1).copy_(torch.matmul(kept, vg).transpose(1, 2))
            saved.append((kept if p > 0 else None, probs))
        ctx.save_for_backward(q, k, v)
        ctx.saved, ctx.args = saved, (packed, heads, scaling, p, first_token, kernel, seed) + args
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        packed, heads, scaling, p, first_token, kernel, seed, threshold, scale = ctx.args
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        grads = _views(dq, dk, dv, packed, first_token, heads)
        for g, ((q_rows, per_seq, qg, kg, vg), (_, _, dqg, dkg, dvg)) in enumerate(
                zip(_views(q, k, v, packed, first_token, heads), grads)):
            kept, probs = ctx.saved[g]
            kept = probs if kept is None else kept
            dctx = grad[q_rows].view(qg.shape[0], per_seq, heads, -1).transpose(1, 2)
            dvg.copy_(torch.matmul(kept.transpose(-1, -2), dctx))
            dkept = torch.matmul(dctx, vg.transpose(-1, -2))
            dscores = kernel.softmax_dropout_backward(dkept, probs, scaling, _group_seed(seed, g), threshold, scale)
            dqg.copy_(torch.matmul(dscores, kg))
            dkg.copy_(torch.matmul(dscores.transpose(-1, -2), qg))
        ctx.saved = None
        return dq, dk, dv, None, None, None, None, None, None
