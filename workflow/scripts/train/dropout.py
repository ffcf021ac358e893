"""The dropout lever on a model as transformers builds it (train.speed.
dropout `fast`, train/speed.py): the keep-mask from one 32-bit draw per
element compared with p x 2^31, instead of `bernoulli_`, which draws from
the same generator element by element and is several times slower on CPUs.
The probability is p within 2^-31; a seed gives the same masks every run
and a resumed run continues them. Put in place per model, as it is built:
its nn.Dropout modules are swapped for FastDropout modules (no forward is
replaced; the attention's dropout stays transformers'). cpuddp's own
encoder takes its dropout from the hash kernel (train/dropout_kernel.py)."""

from __future__ import annotations

import torch

KEEP_SCALE_BITS = 2 ** 31  # random_() on int32 draws uniformly from [0, 2^31)


def fast_dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """F.dropout with the keep-mask from 32-bit integer draws."""
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    draws = torch.empty(input.shape, dtype=torch.int32).random_()
    # The mask as 0/1 in the input's dtype, written in one pass: CPU kernels
    # on bool masks (where, masked_fill, casts) are several times slower
    # than arithmetic on the input's dtype.
    keep = torch.ge(draws, int(p * KEEP_SCALE_BITS), out=torch.empty(input.shape, dtype=input.dtype))
    return _KeepScale.apply(input, keep, 1.0 / (1.0 - p))


class _KeepScale(torch.autograd.Function):
    """input x keep x scale in one pass (addcmul, at the dtype's compute
    precision), forward and backward: bit for bit where(drop, 0, x * scale)."""

    @staticmethod
    def forward(ctx, input, keep, scale: float):
        ctx.scale = scale
        ctx.save_for_backward(keep)
        return torch.addcmul(input.new_zeros(()), input, keep, value=scale)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return torch.addcmul(grad.new_zeros(()), grad, keep, value=ctx.scale), None, None


class FastDropout(torch.nn.Module):
    """nn.Dropout with fast_dropout (the same p and inplace)."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return fast_dropout(input, self.p, self.training, self.inplace)


def fast_dropout_modules(model) -> str | None:
    """Every nn.Dropout module of this model (not of the process) swapped for
    a FastDropout; None when done, else why not."""
    swapped = 0
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is torch.nn.Dropout:
                setattr(module, name, FastDropout(child.p, child.inplace))
                swapped += 1
    return None if swapped else "the model has no nn.Dropout"
