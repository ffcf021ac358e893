"""One forward and backward of the add-norm pass (train/add_norm.py KernelAddNorm), for the tests that
compare its results across threads, builds and ISAs."""

from __future__ import annotations

import torch

from workflow.scripts.train.add_norm import KernelAddNorm


def fused(kernel, a, r, weight, bias, grad, p: float = 0.1, seed: int = 3):
    """(y, da, dr, dweight, dbias) of KernelAddNorm, torch's generator at `seed`."""
    leaves = [t.clone().requires_grad_() for t in (a, r, weight, bias)]
    torch.manual_seed(seed)
    y = KernelAddNorm.apply(*leaves, p, 1e-12, kernel)
    y.backward(grad)
    return (y.detach(), *(t.grad for t in leaves))
