"""The encoder of the BERT family on packed tokens ([tokens, hidden] rows):
embeddings, post-norm layers, and a last layer that computes the first
token alone where the head reads nothing else.

Parameters are torch modules (nn.Embedding, nn.Linear, nn.LayerNorm), so
that weight-decay groups, bf16 casts and the fp32 masters see what they
see in transformers' models; every forward is this file's own."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from workflow.scripts.train.bucket_grads import linear
from workflow.scripts.train.add_norm import KernelAddNorm
from workflow.scripts.train.dropout_kernel import KernelDropout
from workflow.scripts.train.encoder import attention as packed_attention
from workflow.scripts.train.encoder.packing import Packed, bucketed_rows
from workflow.scripts.train.encoder.spec import Spec


def activation(name: str):
    """The config's hidden_act as a function: torch's where it is the same
    function, else transformers' (called, not changed)."""
    if name == "gelu":
        return F.gelu
    if name == "relu":
        return F.relu
    if name in ("gelu_pytorch_tanh", "gelu_new"):
        return functools.partial(F.gelu, approximate="tanh")
    from transformers.activations import ACT2FN

    return ACT2FN[name]


def dropout(x: torch.Tensor, p: float, training: bool, kernel) -> torch.Tensor:
    """torch's dropout, or the hash kernel's (its mask recomputed in backward)."""
    if not training or p == 0.0:
        return x
    if kernel is not None and x.dtype in (torch.bfloat16, torch.float32):
        return KernelDropout.apply(x, p, kernel)
    return F.dropout(x, p, training=True)


def add_norm(x: torch.Tensor, residual: torch.Tensor, norm: nn.LayerNorm, p: float, training: bool, kernel,
             fused: bool = True) -> torch.Tensor:
    """norm(dropout(x) + residual): with `fused`, the kernel's one pass
    (KernelAddNorm) where all four are bf16 (bf16_master) or all fp32, outside
    autocast, else torch's ops. The pass gives the unfused dropout and sum
    bit for bit; the norm's moments are summed in another order, and its
    gamma and beta gradients in float, where torch's bf16 backward lands
    about 5% off a float64 reference at 1,728 rows (ours 0.2%)."""
    if (fused and kernel is not None and x.dtype == residual.dtype == norm.weight.dtype
            and x.dtype in (torch.bfloat16, torch.float32)
            and x.dim() == 2 and x.shape == residual.shape and not torch.is_autocast_enabled("cpu")):
        return KernelAddNorm.apply(x, residual, norm.weight, norm.bias, p if training else 0.0, norm.eps, kernel)
    return norm(dropout(x, p, training, kernel) + residual)


class Embeddings(nn.Module):
    def __init__(self, spec: Spec):
        super().__init__()
        self.word = nn.Embedding(spec.vocab, spec.embedding, padding_idx=spec.pad_id)
        padding = spec.pad_id if spec.roberta_positions else None
        self.position = nn.Embedding(spec.positions, spec.embedding, padding_idx=padding)
        self.token_type = nn.Embedding(spec.token_types, spec.embedding) if spec.token_types else None
        self.norm = nn.LayerNorm(spec.embedding, eps=spec.eps)
        self.project = nn.Linear(spec.embedding, spec.hidden) if spec.embedding != spec.hidden else None
        self.p = spec.hidden_dropout

    def forward(self, ids, position_ids, token_type_ids, kernel, grad_pool=None, rows: int = 0,
                views=None, fused_norm: bool = True) -> torch.Tensor:
        """[tokens, hidden], zero rows appended up to `rows` (bucketed_rows) before the projection."""
        if grad_pool is not None:  # the word embedding's gradient in a table kept across steps
            from workflow.scripts.train.embedding_grad import _ReusedGradEmbedding

            x = _ReusedGradEmbedding.apply(ids, self.word.weight, self.word.padding_idx, grad_pool)
        else:
            x = self.word(ids)
        if self.token_type is not None:
            types = torch.zeros_like(ids) if token_type_ids is None else token_type_ids
            x = x + self.token_type(types)
        x = add_norm(x, self.position(position_ids), self.norm, 0.0, self.training, kernel, fused_norm)
        x = _pad_rows(dropout(x, self.p, self.training, kernel), rows)
        return x if self.project is None else linear(self.project, x, views)


def _pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """x with zero rows appended up to `rows` (none where it has as many)."""
    return F.pad(x, (0, 0, 0, rows - x.shape[0])) if rows > x.shape[0] else x


class Layer(nn.Module):
    """A post-norm transformer layer (BERT's, DistilBERT's)."""

    def __init__(self, spec: Spec):
        super().__init__()
        hidden = spec.hidden
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=spec.eps)
        self.ffn_in = nn.Linear(hidden, spec.intermediate)
        self.ffn_out = nn.Linear(spec.intermediate, hidden)
        self.ffn_norm = nn.LayerNorm(hidden, eps=spec.eps)
        self.act = activation(spec.activation)
        self.heads, self.scaling = spec.heads, spec.head_size ** -0.5
        self.p_attention, self.p_attention_output, self.p = (spec.attention_dropout, spec.attention_output_dropout,
                                                             spec.hidden_dropout)

    def forward(self, x: torch.Tensor, packed: Packed, kernel, first_token: bool = False,
                views=None, fused_norm: bool = True) -> torch.Tensor:
        """x: [rows, hidden] -> [rows, hidden], or [sequences, hidden] (each
        sequence's first token) with first_token; keys and values from every
        token. Rows past the packed tokens (bucketed_rows) take part in every
        row-wise op and in no attention: their outputs reach no token, so
        their gradients are zero. `views`: bucket_grads' (None: torch's
        backward for the linear layers); `fused_norm`: add_norm's one pass."""
        training = self.training
        residual = x.index_select(0, packed.first_rows()) if first_token else x
        context = packed_attention.attention(
            linear(self.query, residual, views), linear(self.key, x, views), linear(self.value, x, views), packed,
            self.heads, self.scaling, self.p_attention if training else 0.0, first_token, kernel)
        attended = add_norm(linear(self.attention_output, context, views), residual, self.attention_norm,
                            self.p_attention_output, training, kernel, fused_norm)
        inner = self.act(linear(self.ffn_in, attended, views))
        return add_norm(linear(self.ffn_out, inner, views), attended, self.ffn_norm, self.p, training, kernel,
                        fused_norm)


class Encoder(nn.Module):
    def __init__(self, spec: Spec):
        super().__init__()
        self.embeddings = Embeddings(spec)
        self.layers = nn.ModuleList(Layer(spec) for _ in range(spec.layers))
        self.reads_first_tokens = spec.task == "classification"
        self.first_token_only = self.reads_first_tokens
        """The last layer computes the first tokens alone (False: every token, for measuring what that saves)."""
        self.fused_norm = True
        """The embeddings' and each layer's (dropout,) residual add and LayerNorm in one kernel pass where the
        kernel is built (False: torch's ops, for measuring what that saves)."""
        self.kernel = None  # the hash-dropout kernel (build): None for torch's dropout
        self.grad_pool = None  # embedding_grad reuse (build): None for torch's embedding backward
        self.bucket_views = None  # grad_buckets direct (train/bucket_grads.py): None for torch's linear backward

    def forward(self, ids, position_ids, token_type_ids, packed: Packed) -> torch.Tensor:
        """[tokens, hidden] for every token, or [sequences, hidden] of the first
        tokens alone where the head reads nothing else (packed order). Where
        the matmuls run in bf16 (oneDNN) the rows are padded to bucketed_rows
        inside, so that a few row counts recur across steps."""
        rows = bucketed_rows(packed.tokens) if _bf16_matmuls(self.layers[0].query.weight) else 0
        views = self.bucket_views
        x = self.embeddings(ids, position_ids, token_type_ids, self.kernel, self.grad_pool, rows, views,
                            self.fused_norm)
        *inner, last = self.layers
        for layer in inner:
            x = layer(x, packed, self.kernel, views=views, fused_norm=self.fused_norm)
        out = last(x, packed, self.kernel, first_token=self.first_token_only, views=views, fused_norm=self.fused_norm)
        if self.reads_first_tokens and not self.first_token_only:
            return out.index_select(0, packed.first_rows())
        return out if self.first_token_only else out[:packed.tokens]


def _bf16_matmuls(weight: torch.Tensor) -> bool:
    """Whether the encoder's matmuls run in bf16: bf16 weights (bf16_master), or bf16 autocast."""
    return weight.dtype == torch.bfloat16 or (torch.is_autocast_enabled("cpu")
                                              and torch.get_autocast_dtype("cpu") == torch.bfloat16)
