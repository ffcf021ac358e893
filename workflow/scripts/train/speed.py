"""Levers on the part of a training step that is not matrix multiplication
(docs/performance.md). Each is a setting under `train.speed` with `auto`
decided here by a stated rule, recorded in environment.json, and changes
the speed of a step, not what it computes:

- dropout `fast`: the keep-mask from one 32-bit draw per element compared
  with p x 2^31, instead of `bernoulli_`, which draws from the same
  generator element by element and is several times slower on CPUs. The
  probability is p to within 2^-31 (bernoulli_'s float draw: 2^-24); a
  seed gives the same masks every run and a resumed run continues them.
- attention `eager`: with attention dropout in training, PyTorch's CPU
  scaled_dot_product_attention falls back to its unfused math path, which
  is slower than transformers' eager attention; without dropout, sdpa.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

KEEP_SCALE_BITS = 2 ** 31  # random_() on int32 draws uniformly from [0, 2^31)


def fast_dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """F.dropout with the keep-mask from 32-bit integer draws (same p)."""
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    drop = torch.empty(input.shape, dtype=torch.int32).random_() < int(p * KEEP_SCALE_BITS)
    # where(), not input * mask: a bool mask in a product is first cast to
    # the input's dtype, one more pass over the tensor forward and backward.
    return torch.where(drop, 0.0, input * (1.0 / (1.0 - p)))


def use_dropout(kind: str) -> None:
    """Route every F.dropout of this process (nn.Dropout calls it too) to `kind`."""
    F.dropout = fast_dropout if kind == "fast" else _TORCH_DROPOUT


_TORCH_DROPOUT = F.dropout
