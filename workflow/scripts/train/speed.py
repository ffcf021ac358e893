"""Levers on the part of a training step that is not matrix multiplication
(docs/performance.md). Each is a setting under `train.speed` with `auto`
decided here by a stated rule, recorded in environment.json, and changes
the speed of a step, not what it computes:

- dropout `fast`: the keep-mask from one 32-bit draw per element compared
  with p x 2^31, instead of `bernoulli_`, which draws from the same
  generator element by element and is several times slower on CPUs. The
  probability is p to within 2^-31 (bernoulli_'s float draw: 2^-24); a
  seed gives the same masks every run and a resumed run continues them.
  The mask is kept as 0/1 in the input's dtype and applied with one
  addcmul forward and one backward (bool-mask kernels are slow on CPU).
- attention `eager`: with attention dropout in training, PyTorch's CPU
  scaled_dot_product_attention falls back to its unfused math path, which
  is slower than transformers' eager attention; without dropout, sdpa.
- last_layer `first_token`: a sequence-classification head reads the
  last layer's first token only ([CLS], <s>), so that layer computes its
  query, attention output and feed-forward for the first token alone (keys
  and values still for every token). The head sees the same numbers, and
  every weight gets the same gradient; the step does about 1/layers less
  work. Fewer dropout masks are drawn, so a seed gives other (equally
  likely) masks than with `all`.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

KEEP_SCALE_BITS = 2 ** 31  # random_() on int32 draws uniformly from [0, 2^31)


def fast_dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """F.dropout with the keep-mask from 32-bit integer draws (same p)."""
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


def use_dropout(kind: str) -> None:
    """Route every F.dropout of this process (nn.Dropout calls it too) to `kind`."""
    F.dropout = fast_dropout if kind == "fast" else _TORCH_DROPOUT


_TORCH_DROPOUT = F.dropout


# Heads that read only the first token of the last hidden state, on
# encoders whose layers are BERT's (attention.self.query ... output.dense).
FIRST_TOKEN_HEADS = ("BertForSequenceClassification", "RobertaForSequenceClassification",
                     "XLMRobertaForSequenceClassification", "CamembertForSequenceClassification",
                     "ElectraForSequenceClassification")


def first_token_last_layer(model) -> str | None:
    """Make the model's last encoder layer compute its first token only;
    None when done, else why it cannot (the model is left as it was)."""
    name = type(model).__name__
    if name not in FIRST_TOKEN_HEADS:
        return f"{name} is not a first-token classification head of a BERT-style encoder"
    config = model.config
    if config.is_decoder or getattr(config, "add_cross_attention", False):
        return f"{name} is a decoder"
    layer = getattr(model, model.base_model_prefix).encoder.layer[-1]
    parts = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.self.scaling",
             "attention.self.attention_head_size", "attention.self.dropout", "attention.output", "feed_forward_chunk")
    missing = [p for p in parts if not _has_path(layer, p)]
    if missing:  # another transformers version laid the layer out otherwise
        return f"{type(layer).__name__} has no {', '.join(missing)}"
    layer.forward = types.MethodType(_first_token_forward, layer)
    return None


def _has_path(obj, path: str) -> bool:
    for name in path.split("."):
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


def _first_token_forward(layer, hidden_states, attention_mask=None, *args, **kwargs):
    """BertLayer.forward for the first token's output alone ([batch, 1, hidden])."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.bert.modeling_bert import eager_attention_forward

    attention = layer.attention.self
    first = hidden_states[:, :1]
    batch, length = hidden_states.shape[:2]
    query = attention.query(first).view(batch, 1, -1, attention.attention_head_size).transpose(1, 2)
    key = attention.key(hidden_states).view(batch, length, -1, attention.attention_head_size).transpose(1, 2)
    value = attention.value(hidden_states).view(batch, length, -1, attention.attention_head_size).transpose(1, 2)
    if attention_mask is not None and attention_mask.dim() == 4 and attention_mask.shape[-2] > 1:
        attention_mask = attention_mask[:, :, :1]  # the first query's row of the mask
    interface = ALL_ATTENTION_FUNCTIONS.get_interface(attention.config._attn_implementation, eager_attention_forward)
    context, _ = interface(attention, query, key, value, attention_mask, scaling=attention.scaling,
                           dropout=attention.dropout.p if attention.training else 0.0)
    attended = layer.attention.output(context.reshape(batch, 1, -1), first)
    return layer.feed_forward_chunk(attended)
