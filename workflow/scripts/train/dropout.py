"""The dropout lever (train.speed.dropout `fast`, train/speed.py): the
keep-mask from one 32-bit draw per element compared with p x 2^31, instead
of `bernoulli_`, put in place per model: its nn.Dropout modules, and its
attention's dropout where the attention is BERT's eager one."""

from __future__ import annotations

import torch

from workflow.scripts.train import dropout_kernel
from workflow.scripts.train.dropout_kernel import KernelDropout, SoftmaxDropout, attention_mask_rows

KEEP_SCALE_BITS = 2 ** 31  # random_() on int32 draws uniformly from [0, 2^31)
NARROW = {16: torch.int16, 8: torch.int8}


def draws_and_threshold(shape, p: float, bits: int) -> tuple[torch.Tensor, int, float]:
    """Uniform integers, the threshold below which an element is dropped,
    and the drop probability that gives: p within 2^-31 at 32 bits; at 16
    or 8 bits p rounded to a multiple of 2^-bits (0.1 -> 0.100006 or
    0.1016), from one 64-bit draw per 4 or 8 elements (the generator's
    calls, not the bytes, are the cost)."""
    if bits == 32:
        return torch.empty(shape, dtype=torch.int32).random_(), int(p * KEEP_SCALE_BITS), p
    count = shape.numel()
    per_word = 64 // bits
    words = torch.empty(-(-count // per_word), dtype=torch.int64).random_(-2 ** 63, 2 ** 63 - 1)
    dropped = round(p * 2 ** bits)
    return words.view(NARROW[bits])[:count].view(shape), dropped - 2 ** (bits - 1), dropped / 2 ** bits


def fast_dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False, bits: int = 32,
                 kernel=None):
    """F.dropout with the keep-mask from integer draws of `bits` bits, or,
    with `kernel` (train/dropout_kernel.py), from its hash in one pass."""
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    if kernel is not None and input.dtype in (torch.bfloat16, torch.float32):
        return KernelDropout.apply(input, p, kernel)
    draws, threshold, p = draws_and_threshold(input.shape, p, bits)
    if p >= 1.0:
        return input * 0.0
    # The mask as 0/1 in the input's dtype, written in one pass: CPU kernels
    # on bool masks (where, masked_fill, casts) are several times slower
    # than arithmetic on the input's dtype.
    keep = torch.ge(draws, threshold, out=torch.empty(input.shape, dtype=input.dtype))
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
    """nn.Dropout's forward with fast_dropout (the same p and inplace)."""

    def __init__(self, p: float = 0.5, inplace: bool = False, bits: int = 32):
        super().__init__()
        self.p, self.inplace, self.bits, self.kernel = p, inplace, bits, None

    def forward(self, input):
        return fast_dropout(input, self.p, self.training, self.inplace, self.bits, self.kernel)


def fast_dropout_modules(model) -> str | None:
    """Every nn.Dropout of this model (not of the process) draws with
    fast_dropout, and so does attention where it is ours (`eager_fast`)."""
    swapped = 0
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is torch.nn.Dropout:
                setattr(module, name, FastDropout(child.p, child.inplace))
                swapped += 1
    if model.config._attn_implementation == "eager" and type(model).__module__.split(".")[-2] in EAGER_AS_BERT:
        model.set_attn_implementation(FAST_EAGER)
    return None if swapped else "the model has no nn.Dropout"


# Models whose eager attention is BERT's (scores, mask, softmax, dropout,
# values); theirs is replaced by the same with fast_dropout.
EAGER_AS_BERT = ("bert", "roberta", "xlm_roberta", "camembert", "electra", "distilbert", "albert")
FAST_EAGER = "cpuddp_eager_fast_dropout"


def _eager_fast_dropout(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' BERT eager_attention_forward, with fast_dropout."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    weights = torch.matmul(query, key.transpose(2, 3))
    kernel = getattr(module, "dropout_kernel", None)  # set by hash_dropout_masks
    if kernel is not None and getattr(module, "softmax_fp32", False) and weights.dtype == torch.bfloat16:
        rows = attention_mask_rows(attention_mask, weights)
        if rows is not None:  # scale, mask, softmax and dropout in one pass (train/dropout_kernel.c)
            weights = SoftmaxDropout.apply(weights, rows, scaling, dropout if module.training else 0.0, kernel)
            return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights
    if getattr(module, "softmax_fp32", False):  # set by set_softmax_fp32
        weights = weights * scaling if attention_mask is None else torch.add(attention_mask, weights, alpha=scaling)
        weights = torch.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    else:
        weights = weights * scaling
        if attention_mask is not None:
            weights = weights + attention_mask
        weights = torch.softmax(weights, dim=-1)
    bits = getattr(module, "dropout_bits", 32)  # set by set_dropout_bits
    weights = fast_dropout(weights, p=dropout, training=module.training, bits=bits, kernel=kernel)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(FAST_EAGER, _eager_fast_dropout)
    AttentionMaskInterface.register(FAST_EAGER, eager_mask)  # an additive mask, as eager's


_register_attention()


def _why_not_fast(model) -> str | None:
    fast = any(isinstance(m, FastDropout) for m in model.modules())
    return None if fast else "dropout is torch's (train.speed.dropout)"


def _set_on_fast_dropout(model, name: str, attention_name: str, value) -> str | None:
    """Set `value` as `name` on the model's FastDropout modules and as
    `attention_name` on its other modules (the fast eager attention reads
    it from its attention module); why not where dropout is torch's."""
    if why_not := _why_not_fast(model):
        return why_not
    for module in model.modules():
        setattr(module, name if isinstance(module, FastDropout) else attention_name, value)
    return None


def set_dropout_bits(model, bits: int) -> str | None:
    """Draw the model's fast dropout masks from `bits`-bit integers."""
    return _set_on_fast_dropout(model, "bits", "dropout_bits", bits)


def hash_dropout_masks(model) -> str | None:
    """Have the model's fast dropout (modules and attention) take its masks
    from the one-pass kernel (train/dropout_kernel.py), where it builds."""
    if why_not := _why_not_fast(model):  # before the kernel is built
        return why_not
    kernel, why = dropout_kernel.load()
    return why if kernel is None else _set_on_fast_dropout(model, "kernel", "dropout_kernel", kernel)


def set_softmax_fp32(model) -> str | None:
    """Have the fast eager attention scale and mask its scores in one op
    (mask + scale x scores) and take their softmax in fp32, rounded once to
    the scores' dtype: bf16's softmax kernel is slower than fp32's (1.7
    against 0.6 ms on a 16 x 12 x 55 x 55 block, AMD EPYC avx512_bf16) and
    rounds its input first."""
    if model.config._attn_implementation != FAST_EAGER:
        return "the attention is not cpuddp's eager one (train.speed.dropout fast, attention eager)"
    for module in model.modules():  # the attention module is the one the attention function gets
        module.softmax_fp32 = True
    return None
