"""Attention on packed tokens (workflow/scripts/train/encoder/attention.py):
the hash kernel's one-node attention (bf16: scale, softmax and dropout in
one pass, the mask recomputed in backward) gives what autograd gives on
the same arithmetic in fp32 with the same masks, for every token's queries
and for first tokens alone; each group of equally long sequences draws
other masks."""

from __future__ import annotations

import pytest
import torch

from workflow.scripts.train import dropout_kernel
from workflow.scripts.train.encoder import attention
from workflow.scripts.train.encoder.packing import from_offsets

HEADS, SIZE = 4, 8
LENGTHS = [9, 9, 6, 6, 6, 2]  # packed longest first: three groups


@pytest.fixture
def kernel(hash_dropout_kernel):
    if hash_dropout_kernel[0] is None:
        pytest.skip(f"the dropout kernel did not build: {hash_dropout_kernel[1]}")
    return hash_dropout_kernel[0]


def reference(q, k, v, packed, p, seed, first_token):
    """The same attention by autograd in fp32, the kernel's masks from their definition."""
    out = []
    for g, (_, _, qg, kg, vg) in enumerate(attention._views(q, k, v, packed, first_token, HEADS)):
        probs = torch.softmax(torch.matmul(qg, kg.transpose(-1, -2)) * SIZE ** -0.5, dim=-1)
        keep = dropout_kernel.keep_reference(probs.numel(), attention._group_seed(seed, g),
                                             dropout_kernel.dropped(p)).view(probs.shape)
        out.append(attention._merge(torch.matmul(probs * keep * dropout_kernel.keep_scale(p), vg)))
    return torch.cat(out)


@pytest.mark.parametrize("first_token", [False, True])
@pytest.mark.parametrize("p", [0.0, 0.25])
def test_the_kernels_attention_is_autograds_with_the_same_masks(kernel, monkeypatch, p, first_token):
    packed = from_offsets([0, *torch.tensor(LENGTHS).cumsum(0).tolist()])
    torch.manual_seed(0)
    k, v = (torch.randn(packed.tokens, HEADS * SIZE) for _ in range(2))
    q = torch.randn(packed.batch if first_token else packed.tokens, HEADS * SIZE)
    weights = torch.randn(q.shape[0], HEADS * SIZE)
    monkeypatch.setattr(attention, "draw_seed", lambda: 0x0123456789ABCDEF)
    low = [t.bfloat16().requires_grad_() for t in (q, k, v)]
    out = attention.attention(*low, packed, HEADS, SIZE ** -0.5, p, first_token, kernel)
    (out.float() * weights).sum().backward()
    full = [t.bfloat16().float().requires_grad_() for t in (q, k, v)]
    want = reference(*full, packed, p, 0x0123456789ABCDEF if p else 0, first_token)
    (want * weights).sum().backward()
    assert out.shape == want.shape
    assert (out.float() - want).norm() <= 0.02 * want.norm()
    for got, expected in zip(low, full):
        assert (got.grad.float() - expected.grad).norm() <= 0.03 * expected.grad.norm()


def test_groups_draw_other_masks():
    seeds = {attention._group_seed(42, g) for g in range(100)}
    assert len(seeds) == 100 and 42 not in seeds
