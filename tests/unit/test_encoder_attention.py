"""Attention on packed tokens (workflow/scripts/train/encoder/attention.py):
the kernel's attention (bf16 or fp32: every sequence and head of a layer in
one C call, scale, softmax and dropout in the same pass, the mask recomputed
in backward) gives what autograd gives on the same arithmetic in float64 with
the same masks, for every token's queries and for first tokens alone, on
one thread or two."""

from __future__ import annotations

import pytest
import torch

from workflow.scripts.train import dropout_kernel
from workflow.scripts.train.encoder import attention
from workflow.scripts.train.encoder.packing import from_offsets

HEADS, SIZE = 4, 8
LENGTHS = [9, 9, 6, 6, 6, 2]  # packed longest first: three groups
# And a head as wide as BERT-base's, over sequences longer than the kernel's 4 x 16-key blocks
# of a block's 4 rows, with partial blocks of rows and keys left over (dropout_kernel.c, mac).
SHAPES = {"small": (HEADS, SIZE, LENGTHS), "wide": (2, 64, [70, 33, 17, 5])}
# Relative error allowed in norm (output, gradients): bf16's rounding of the inputs and outputs, or fp32's sums.
TOLERANCE = {torch.bfloat16: (0.02, 0.03), torch.float32: (1e-5, 1e-5)}


@pytest.fixture
def kernel(hash_dropout_kernel):
    if hash_dropout_kernel[0] is None:
        pytest.skip(f"the dropout kernel did not build: {hash_dropout_kernel[1]}")
    return hash_dropout_kernel[0]


def reference(q, k, v, packed, p, seed, first_token, heads=HEADS, size=SIZE):
    """The same attention by autograd in float64, sequence by sequence, the kernel's masks from
    their definition: element e of the flat probs ([heads, queries, keys] per sequence) kept by hash(seed, e)."""
    total = sum(heads * (1 if first_token else n) * n for n in packed.lengths)
    keep = dropout_kernel.keep_reference(total, seed, dropout_kernel.dropped(p))
    out, at = [], 0
    for s, n in enumerate(packed.lengths):
        start = packed.offsets[s]
        rows = q[s:s + 1] if first_token else q[start:start + n]
        qs, ks, vs = (t.view(t.shape[0], heads, size).transpose(0, 1) for t in (rows, k[start:start + n],
                                                                            v[start:start + n]))
        probs = torch.softmax(torch.matmul(qs, ks.transpose(-1, -2)) * size ** -0.5, dim=-1)
        mask = keep[at:at + probs.numel()].view(probs.shape)
        at += probs.numel()
        context = torch.matmul(probs * mask * dropout_kernel.keep_scale(p), vs)
        out.append(context.transpose(0, 1).reshape(rows.shape[0], heads * size))
    return torch.cat(out)


@pytest.mark.parametrize("first_token", [False, True])
@pytest.mark.parametrize("p", [0.0, 0.25])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", TOLERANCE)
def test_the_kernels_attention_is_autograds_with_the_same_masks(kernel, monkeypatch, p, first_token, shape, dtype):
    heads, size, lengths = SHAPES[shape]
    packed = from_offsets([0, *torch.tensor(lengths).cumsum(0).tolist()])
    torch.manual_seed(0)
    k, v = (torch.randn(packed.tokens, heads * size) for _ in range(2))
    q = torch.randn(packed.batch if first_token else packed.tokens, heads * size)
    weights = torch.randn(q.shape[0], heads * size)
    monkeypatch.setattr(attention, "draw_seed", lambda: 0x0123456789ABCDEF)
    low = [t.to(dtype).clone().requires_grad_() for t in (q, k, v)]
    out = attention.attention(*low, packed, heads, size ** -0.5, p, first_token, kernel)
    assert out.grad_fn.name() == "PackedAttentionBackward" and out.dtype == dtype
    (out.float() * weights).sum().backward()
    full = [t.to(dtype).double().detach().requires_grad_() for t in (q, k, v)]
    want = reference(*full, packed, p, 0x0123456789ABCDEF if p else 0, first_token, heads, size)
    (want * weights.double()).sum().backward()
    assert out.shape == want.shape
    tolerance_out, tolerance_grad = TOLERANCE[dtype]
    assert (out.double() - want).norm() <= tolerance_out * want.norm()
    for got, expected in zip(low, full):
        assert (got.grad.double() - expected.grad).norm() <= tolerance_grad * expected.grad.norm()


@pytest.mark.parametrize("first_token", [False, True])
@pytest.mark.parametrize("dtype", TOLERANCE)
def test_the_same_bits_on_one_thread_or_two(kernel, monkeypatch, first_token, dtype):
    """Two threads cut the sequences into two calls; every mask and sum is per element, so nothing changes."""
    packed = from_offsets([0, *torch.tensor(LENGTHS).cumsum(0).tolist()])
    torch.manual_seed(1)
    k, v = (torch.randn(packed.tokens, HEADS * SIZE, dtype=dtype) for _ in range(2))
    q = torch.randn(packed.batch if first_token else packed.tokens, HEADS * SIZE, dtype=dtype)
    monkeypatch.setattr(attention, "draw_seed", lambda: 7)
    results, threads = [], torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            out = attention.attention(*leaves, from_offsets(packed.offsets), HEADS, SIZE ** -0.5, 0.25,
                                      first_token, kernel)
            out.float().square().sum().backward()
            results.append([out, *(t.grad for t in leaves)])
    finally:
        torch.set_num_threads(threads)
    assert len(attention.layout(from_offsets(packed.offsets), first_token, HEADS).calls) >= 1
    for one, two in zip(*results):
        assert torch.equal(one, two)


def test_calls_split_the_work_evenly_and_cover_every_sequence():
    assert attention._split([9, 9, 6, 6, 6, 2], 2) == [(0, 3), (3, 3)]
    assert attention._split([5], 2) == [(0, 1)]
    assert attention._split([1, 1, 1, 1], 1) == [(0, 4)]


def test_no_memory_for_the_scratch_is_one_clear_error_not_a_crash(kernel):
    """A sequence too long for the kernel's scratch (aligned_alloc fails): the call computes nothing and
    returns 1, and the rank raises MemoryError naming the length and the fix, both ways."""
    huge = 1 << 40  # the scratch would be terabytes; the data is never read
    offsets = tuple(torch.tensor([0, huge], dtype=torch.int64) for _ in range(3))
    plan = attention.Layout(offsets, scores=HEADS, calls=[(0, 1)])
    q = torch.zeros(1, HEADS * SIZE, dtype=torch.bfloat16)
    args = (HEADS, SIZE ** -0.5, 0, 0, 1.0)
    with pytest.raises(MemoryError, match=f"sequences of up to {huge} tokens.*train.batch_size"):
        kernel.attention(q, q, q, plan, *args)
    with pytest.raises(MemoryError, match="backward found no memory"):
        kernel.attention_backward(q, q, q, q, q.new_zeros(HEADS), plan, *args)


@pytest.mark.parametrize("kernel_or_torch", ["kernel", "torch"])
@pytest.mark.parametrize("first_token", [False, True])
def test_rows_past_the_tokens_take_part_in_nothing(kernel_or_torch, first_token, hash_dropout_kernel, monkeypatch):
    """bucketed_rows' padding: q, k and v with rows past the packed tokens (here not zeros, so any read of
    them would show) give the unpadded call's context and gradients bit for bit in the real rows, a zero
    context and zero gradients in the others, with the kernel (which reads and writes the rows where
    they are) and with torch's ops (which slice the tokens out)."""
    kernel = hash_dropout_kernel[0] if kernel_or_torch == "kernel" else None
    if kernel_or_torch == "kernel" and kernel is None:
        pytest.skip(f"the dropout kernel did not build: {hash_dropout_kernel[1]}")
    packed = from_offsets([0, *torch.tensor(LENGTHS).cumsum(0).tolist()])
    queries, extra = packed.batch if first_token else packed.tokens, 5
    torch.manual_seed(2)
    k, v = (torch.randn(packed.tokens + extra, HEADS * SIZE, dtype=torch.bfloat16) for _ in range(2))
    q = torch.randn(queries + (0 if first_token else extra), HEADS * SIZE, dtype=torch.bfloat16)
    weights = torch.randn(q.shape[0], HEADS * SIZE)
    monkeypatch.setattr(attention, "draw_seed", lambda: 11)
    p = 0.25 if kernel is not None else 0.0  # torch's dropout draws other masks each call
    results = []
    for rows, keys in ((q.shape[0], packed.tokens + extra), (queries, packed.tokens)):
        leaves = [q[:rows].clone().requires_grad_(), k[:keys].clone().requires_grad_(),
                  v[:keys].clone().requires_grad_()]
        out = attention.attention(*leaves, packed, HEADS, SIZE ** -0.5, p, first_token, kernel)
        (out.float() * weights[:rows]).sum().backward()
        results.append((out, *(t.grad for t in leaves)))
    (out, dq, dk, dv), (plain, plain_dq, plain_dk, plain_dv) = results
    assert out.shape == q.shape and torch.equal(out[:queries], plain) and not out[queries:].any()
    assert torch.equal(dq[:queries], plain_dq) and not dq[queries:].any()
    for grad, want in ((dk, plain_dk), (dv, plain_dv)):
        assert torch.equal(grad[:packed.tokens], want) and not grad[packed.tokens:].any()
