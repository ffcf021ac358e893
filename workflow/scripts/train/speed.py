"""Levers on the part of a training step that is not matrix multiplication
(docs/performance.md). Each is a setting under `train.speed`; `auto` is
decided by a stated rule in settings/levers.py, recorded in environment.json,
and `apply` puts every lever in place here. They change the speed of a
step, not what it computes:

- dropout `fast`: the keep-mask from one 32-bit draw per element compared
  with p x 2^31, instead of `bernoulli_`, which draws from the same
  generator element by element and is several times slower on CPUs. The
  probability is p to within 2^-31 (bernoulli_'s float draw: 2^-24); a
  seed gives the same masks every run and a resumed run continues them.
  The mask is kept as 0/1 in the input's dtype and applied with one
  addcmul forward and one backward (bool-mask kernels are slow on CPU).
  Put in place per model (train/dropout.py), never for the process.
- dropout_bits `16`: those draws 16 bits wide, four from one 64-bit draw
  (the generator's calls are the cost): p is then exact to 1/65536 (0.1
  becomes 0.100006, and the scale follows it). Not bit for bit the 32-bit
  masks: judged by accuracy over seeds (bench/accuracy_seeds.py).
- dropout_mask `hash`: fast dropout's keep-mask from a hash of the
  element's index and a seed (one int64 from torch's generator per call,
  so seeds and resume work as before), applied in one C pass and
  recomputed in backward, where torch's path draws, compares, stores and
  reads back a mask (train/dropout_kernel.c). p exact to 1/65536; other
  masks, judged by accuracy over seeds.
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
- padding `drop`: every encoder layer computes on the real tokens only,
  packed as [tokens, hidden]; only the attention scores see the padded
  layout (train/unpad.py). The same outputs at real positions and the
  same gradients, not bit for bit (a QA loss also reads the padded
  positions, here the head's bias): judged by accuracy over seeds.
- embedding_grad `reuse`: the word embedding's gradient is written into a
  buffer kept from step to step, zeroing only the rows the last step
  touched, instead of a new zeroed table every step: a table over 32 MB
  comes from fresh pages of the OS each time (glibc's malloc maps and
  unmaps it), and faulting them in cost more than the rest of the
  embedding's backward. The gradient is torch's, bit for bit.

- softmax `fp32`: in cpuddp's eager attention (dropout `fast`, attention
  `eager`) the scores are scaled and masked by one op (mask + scale x
  scores) and their softmax is computed in fp32 and rounded once to the
  scores' dtype: in bf16 faster than the bf16 softmax kernel, which also
  rounds its input first. Not bit for bit: judged by accuracy over seeds.
- optimizer `one_pass` (train.precision bf16_master only): one C kernel
  per parameter widens the bf16 gradient, scales it by the clip factor,
  updates the fp32 master and moments and rounds the master into the bf16
  weight, in one pass over memory, where torch's path takes three (widen,
  fused AdamW, copy back); clipping's norm is summed from the bf16
  gradients (train/master.py, master_adamw.c). torch's AdamW arithmetic
  in float, without its fused multiply-adds: not bit for bit, judged by
  accuracy over seeds. Off where no C compiler builds the kernel.
- allreduce `shm`: ranks that share one node sum their gradients through
  shared memory instead of the backend's transport (gloo: TCP over
  loopback); every rank adds in rank order, so weights stay equal, and two
  ranks get gloo's sum bit for bit (train/node_allreduce.py).

And two that need no setting: gradient clipping skips its multiply when
the total norm is within `max_grad_norm` (the factor is then exactly 1);
DDP broadcasts the model's buffers before every forward only when some
buffer changes in training (`buffers_change`): a transformer's buffers
(position ids) are constants, and the broadcast is a collective every
rank waits on each step.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import torch
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

from workflow.scripts.train import master_kernel, node_allreduce
from workflow.scripts.train.embedding_grad import GradPool, reuse_embedding_grad
from workflow.scripts.train.dropout import fast_dropout_modules, hash_dropout_masks, set_dropout_bits, set_softmax_fp32
from workflow.scripts.train.unpad import bert_style_layers, unpad_encoder

# Heads that read only the first token of the last hidden state, on
# encoders whose layers are BERT's (attention.self.query ... output.dense).
FIRST_TOKEN_HEADS = ("BertForSequenceClassification", "RobertaForSequenceClassification",
                     "XLMRobertaForSequenceClassification", "CamembertForSequenceClassification",
                     "ElectraForSequenceClassification")


def first_token_last_layer(model) -> str | None:
    """Make the model's last encoder layer compute its first token only;
    None when done, else why it cannot (the model is left as it was)."""
    layers, why_not = bert_style_layers(model, FIRST_TOKEN_HEADS, "first-token classification head")
    if why_not:
        return why_not
    layer = layers[-1]
    layer.forward = types.MethodType(_first_token_forward, layer)
    layer.first_token_only = True  # read by the padding lever (train/unpad.py)
    return None


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


def clip_gradients(parameters, max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_, without its multiply of every
    gradient when the factor is clamped to 1 (the same result: x * 1.0 is x)."""
    parameters = list(parameters)
    total = get_total_norm([p.grad for p in parameters if p.grad is not None])
    if max_norm / (total + 1e-6) < 1.0:  # the factor torch computes, before it clamps it to 1
        clip_grads_with_norm_(parameters, max_norm, total)
    return total


def buffers_change(model) -> bool:
    """Whether a buffer of `model` changes in training (batch norm's running
    statistics), so that DDP must broadcast rank 0's before each forward."""
    return any(isinstance(m, torch.nn.modules.batchnorm._NormBase) and m.track_running_stats
               for m in model.modules())


@dataclass
class Parts:
    """What the levers act on besides the model, and what they hand on."""
    is_qa: bool = False
    ipex: bool = False
    pool: GradPool = field(default_factory=lambda: GradPool())
    rows_of: torch.Tensor | None = None
    """The word embedding whose touched rows alone are all-reduced (comm.py)."""
    backend: str = "gloo"
    timeout_s: float = 600.0
    node: object = None
    """The node's shared-memory all-reduce (train/node_allreduce.py), for comm.py."""
    precision: str | None = None
    """train.precision as decided (None: not known here)."""
    one_pass_optimizer: bool = False
    """The kernel of optimizer one_pass loaded: bf16_master's optimizer may take it (state.make_optimizer)."""


def _attention(model, value: str, parts: Parts) -> str | None:
    model.set_attn_implementation(value)
    return None


def _dropout(model, value: str, parts: Parts) -> str | None:
    return fast_dropout_modules(model)


def _dropout_bits(model, value: str, parts: Parts) -> str | None:
    return set_dropout_bits(model, int(value))


def _dropout_mask(model, value: str, parts: Parts) -> str | None:
    return hash_dropout_masks(model)


def _last_layer(model, value: str, parts: Parts) -> str | None:
    return "question answering reads every token" if parts.is_qa else first_token_last_layer(model)


def _padding(model, value: str, parts: Parts) -> str | None:
    return unpad_encoder(model)


def _embedding_grad(model, value: str, parts: Parts) -> str | None:
    if parts.ipex:  # IPEX replaces modules: its embedding is left as it is
        return "IPEX optimizes the model"
    return reuse_embedding_grad(model, parts.pool)


def _softmax(model, value: str, parts: Parts) -> str | None:
    return set_softmax_fp32(model)


def _allreduce(model, value: str, parts: Parts) -> str | None:
    if parts.backend != "gloo":  # oneCCL adds through its own shared-memory transport within a node
        return f"backend {parts.backend} has its own transport within a node"
    parts.node, why_not = node_allreduce.create(parts.timeout_s)
    return why_not


def _optimizer(model, value: str, parts: Parts) -> str | None:
    if parts.precision not in (None, "bf16_master"):
        return f"train.precision {parts.precision} has no fp32 masters (one_pass is bf16_master's update)"
    kernel, why = master_kernel.load()
    parts.one_pass_optimizer = kernel is not None
    return None if kernel else why


def _embedding_allreduce(model, value: str, parts: Parts) -> str | None:
    parts.rows_of = model.get_input_embeddings().weight
    return None


# The function that puts each lever in place when its value is not the
# rule's `off` (settings/levers.py), in this order (attention before dropout,
# which swaps the attention's implementation for its own; dropout before
# the width of its draws and the softmax of its attention).
APPLY = {"attention": _attention, "dropout": _dropout, "dropout_bits": _dropout_bits,
         "dropout_mask": _dropout_mask, "last_layer": _last_layer,
         "padding": _padding, "embedding_grad": _embedding_grad, "embedding_allreduce": _embedding_allreduce,
         "softmax": _softmax, "allreduce": _allreduce, "optimizer": _optimizer}


def apply(model, chosen, parts: Parts | None = None) -> tuple[Parts, dict[str, str]]:
    """Put every lever of `chosen` (a settings.levers.Levers) in place on
    `model`; per lever "on", "off", or "off: <why not>" (the model is
    left as it was for that lever)."""
    from workflow.scripts.settings.levers import RULES

    parts = parts or Parts()
    status = {}
    for name, put in APPLY.items():
        value = getattr(chosen, name)
        if value == RULES[name].off:
            status[name] = f"off ({value})"
            continue
        why_not = put(model, value, parts)
        status[name] = f"on ({value})" if why_not is None else f"off: {why_not}"
    return parts, status
