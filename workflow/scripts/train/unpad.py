"""The padding lever (train.speed.padding `drop`, train/speed.py): the
encoder's layers compute on the real tokens only ("unpadding", as NVIDIA's
BERT and MosaicBERT do). A batch padded to [batch, length] holds N real
tokens; every linear layer, activation, layer norm, dropout and residual
add of every layer runs on the packed [N, hidden] rows instead of
[batch x length, hidden]. Only the attention scores need the padded
layout: per layer the packed queries, keys and values are scattered into
zero-padded [batch, heads, length, head_dim] tensors, attention runs as
transformers runs it (the model's attention implementation and its mask),
and the context is gathered back to the packed rows.

The embeddings run padded, as before; their output is packed once before
the first layer, and the last layer's is scattered back to [batch, length,
hidden], zeros at padding, for the head. The outputs at real positions and
the gradients are the padded computation's (padded positions are masked as
keys and never read), though not bit for bit. A question-answering loss
also reads the padded positions' logits (transformers does not mask them):
here they are the head's bias. With last_layer `first_token` the last
layer computes keys and values for every real token and the rest for each
sequence's first token only, as the padded lever does."""

from __future__ import annotations

import types

import torch

ENCODERS = ("Bert", "Roberta", "XLMRoberta", "Camembert", "Electra")
HEADS = tuple(f"{encoder}For{head}" for encoder in ENCODERS
              for head in ("SequenceClassification", "QuestionAnswering"))
LAYER_PARTS = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.self.scaling",
               "attention.self.attention_head_size", "attention.self.dropout", "attention.output",
               "feed_forward_chunk")


def bert_style_layers(model, heads: tuple[str, ...], kind: str) -> tuple[list | None, str | None]:
    """(the encoder layers, None) of a `heads` model whose layers are laid
    out as LAYER_PARTS names, or (None, why not)."""
    name = type(model).__name__
    if name not in heads:
        return None, f"{name} is not a {kind} of a BERT-style encoder"
    config = model.config
    if config.is_decoder or getattr(config, "add_cross_attention", False):
        return None, f"{name} is a decoder"
    base = getattr(model, model.base_model_prefix)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if not layers:
        return None, f"{type(base).__name__} has no encoder.layer"
    for layer in layers:
        missing = [p for p in LAYER_PARTS if not has_path(layer, p)]
        if missing:  # another transformers version laid the layer out otherwise
            return None, f"{type(layer).__name__} has no {', '.join(missing)}"
    return list(layers), None


def unpad_encoder(model) -> str | None:
    """Make the model's encoder layers compute on real tokens only; None
    when done, else why it cannot (the model is left as it was)."""
    _, why_not = bert_style_layers(model, HEADS, "classification or question-answering head")
    if why_not:
        return why_not
    base = getattr(model, model.base_model_prefix)
    base.register_forward_pre_hook(_stash_padding, with_kwargs=True)
    base.encoder.forward = types.MethodType(_encoder_forward, base.encoder)
    return None


def has_path(obj, path: str) -> bool:
    for name in path.split("."):
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


def _stash_padding(base, args, kwargs):
    """The base model's 2D attention mask (1 = real token), for its encoder;
    None where the layers must run as they are (hidden states or attention
    weights asked for: they are read per layer, padded)."""
    mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
    asked = any(kwargs.get(f"output_{k}", getattr(base.config, f"output_{k}", False))
                for k in ("hidden_states", "attentions"))
    base.encoder._unpad_mask = None if asked or mask is None or mask.dim() != 2 else mask


def _encoder_forward(encoder, hidden_states, attention_mask=None, *args, **kwargs):
    """The encoder's forward on packed rows, or its own where unpadding
    cannot help or would change what it computes."""
    real = encoder.__dict__.pop("_unpad_mask", None)
    own = type(encoder).forward
    if (real is None or args or kwargs.get("encoder_hidden_states") is not None
            or kwargs.get("past_key_values") is not None or real.shape != hidden_states.shape[:2]):
        return own(encoder, hidden_states, attention_mask, *args, **kwargs)
    real = real.bool()
    checkpointed = encoder.training and any(getattr(layer, "gradient_checkpointing", False) for layer in encoder.layer)
    # Every head reads the first token: it must be real (right padding).
    if checkpointed or bool(real.all()) or not bool(real[:, 0].all()):
        return own(encoder, hidden_states, attention_mask, *args, **kwargs)
    from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions

    batch, length, width = hidden_states.shape
    shape = Shape(batch, length, real.reshape(-1).nonzero().squeeze(1))
    rows = hidden_states.reshape(-1, width).index_select(0, shape.index)
    *inner, last = encoder.layer
    for layer in inner:
        rows = _packed_layer(layer, rows, shape, attention_mask)
    if getattr(last, "first_token_only", False):  # last_layer first_token: [batch, 1, hidden]
        lengths = real.sum(1)
        out = _first_token_layer(last, rows, shape, attention_mask, lengths.cumsum(0) - lengths)
    else:
        out = shape.scatter(_packed_layer(last, rows, shape, attention_mask)).view(batch, length, -1)
    return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=out)


class Shape:
    """The padded layout of a packed batch: row i of the packed rows is
    position index[i] of the flattened [batch x length]."""

    def __init__(self, batch: int, length: int, index: torch.Tensor):
        self.batch, self.length, self.index = batch, length, index

    def scatter(self, rows: torch.Tensor) -> torch.Tensor:
        """[N, width] -> [batch x length, width], zeros at padding."""
        return rows.new_zeros(self.batch * self.length, rows.shape[-1]).index_copy_(0, self.index, rows)

    def heads(self, rows: torch.Tensor, head_size: int) -> torch.Tensor:
        """[N, heads x head_size] -> [batch, heads, length, head_size]."""
        return self.scatter(rows).view(self.batch, self.length, -1, head_size).transpose(1, 2)


def _attend(attention, query, key, value, mask):
    """The model's attention implementation, as BertSelfAttention calls it:
    the context as [batch, queries, heads, head_size]."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.bert.modeling_bert import eager_attention_forward

    interface = ALL_ATTENTION_FUNCTIONS.get_interface(attention.config._attn_implementation, eager_attention_forward)
    context, _ = interface(attention, query, key, value, mask, scaling=attention.scaling,
                           dropout=attention.dropout.p if attention.training else 0.0)
    return context


def _packed_layer(layer, rows: torch.Tensor, shape: Shape, mask) -> torch.Tensor:
    """BertLayer.forward on the packed rows [N, hidden]."""
    attention = layer.attention.self
    size = attention.attention_head_size
    query, key, value = (shape.heads(project(rows), size)
                         for project in (attention.query, attention.key, attention.value))
    context = _attend(attention, query, key, value, mask)
    context = context.reshape(shape.batch * shape.length, -1).index_select(0, shape.index)
    return layer.feed_forward_chunk(layer.attention.output(context, rows))


def _first_token_layer(layer, rows: torch.Tensor, shape: Shape, mask, starts: torch.Tensor) -> torch.Tensor:
    """The last layer for each sequence's first token ([batch, 1, hidden]),
    its keys and values from every real token; `starts` are the packed rows
    of the first tokens."""
    attention = layer.attention.self
    size = attention.attention_head_size
    first = rows.index_select(0, starts).unsqueeze(1)
    query = attention.query(first).view(shape.batch, 1, -1, size).transpose(1, 2)
    key, value = shape.heads(attention.key(rows), size), shape.heads(attention.value(rows), size)
    if mask is not None and mask.dim() == 4 and mask.shape[-2] > 1:
        mask = mask[:, :, :1]  # the first query's row of the mask
    context = _attend(attention, query, key, value, mask)
    return layer.feed_forward_chunk(layer.attention.output(context.reshape(shape.batch, 1, -1), first))
