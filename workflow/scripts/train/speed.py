"""Levers on the part of a training step that is not matrix multiplication
(docs/levers.md). Each is a setting under `train.speed`; `auto` is
decided by a stated rule in settings/levers.py, recorded in environment.json,
and `apply` puts every lever in place here, once, as the model is built
(train/model_code.py picks the model code first). No lever replaces a
`forward` of any module (encoder/guard.py finds one that does).

On cpuddp's own encoder (train/encoder/) the model levers are choices of
its modules: attention on packed real tokens with the softmax in fp32
(padding, softmax, attention: built in); the last layer of a first-token
classification head computes the first tokens alone (last_layer); dropout
from the hash kernel (dropout_mask `hash`, train/dropout_kernel.c) or
torch's; the word embedding's gradient into a table kept across steps
(embedding_grad `reuse`, train/embedding_grad.py).

On a model as transformers builds it only the exact levers that replace no
forward: attention `eager` or `sdpa` (transformers' own implementations);
dropout `fast` (its nn.Dropout modules swapped for train/dropout.py's,
which draw the keep-mask from 32-bit integers, bit for bit the same masks
each run; the attention's dropout stays transformers'). The others are off
there with the reason.

On both paths: allreduce `shm` (ranks of a node sum through shared
memory, train/node_allreduce.py), embedding_allreduce `rows` (only the
touched rows of the word embedding, comm.py). On cpuddp's encoder only, as
it is not exact: optimizer `one_pass` (bf16_master's update in one C pass,
train/master.py). And three that need no
setting: gradient clipping skips its multiply when the total norm is within
`max_grad_norm`; DDP broadcasts buffers only when some buffer changes in
training (`buffers_change`); torch's AdamW steps with denormal floats
flushed on its threads (train/denormals.py, put in place by train/state.py).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

from workflow.scripts.train import allocator, master_kernel, node_allreduce
from workflow.scripts.train.bucket_grads import BucketViews
from workflow.scripts.train.dropout import fast_dropout_modules
from workflow.scripts.train.embedding_grad import GradPool
from workflow.scripts.train.encoder import PackedModel


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


def buffer_sync(model) -> dict:
    """DDP's keyword for `buffers_change`: torch 2.13 deprecates broadcast_buffers for
    forward_sync_buffers (which still syncs buffers once at init: harmless, every rank
    loads the same weights); the Intel env's torch 2.8 knows only broadcast_buffers."""
    from torch.nn.parallel import DistributedDataParallel

    key = "forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters \
        else "broadcast_buffers"
    return {key: buffers_change(model)}


@dataclass
class Parts:
    """What the levers act on besides the model, and what they hand on."""
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
    views: BucketViews | None = None
    """grad_buckets direct: the bucket views the comm hook learns and the encoder's backward writes into."""


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
    weight = model.get_input_embeddings().weight
    if not weight.requires_grad:
        return "the word embedding is frozen (train.lora): it has no gradient to all-reduce"
    parts.rows_of = weight
    return None


def _attention(model, value: str, parts: Parts) -> str | None:
    model.set_attn_implementation(value)  # transformers' own implementations: nothing replaced
    return None


def _dropout(model, value: str, parts: Parts) -> str | None:
    return fast_dropout_modules(model)


def _off(why: str):
    return lambda model, value, parts: why


PATCHING = "it would replace a transformers forward; cpuddp's encoder (train.model_code) has it"
INEXACT = "not exact, so only on cpuddp's encoder (train.model_code)"
UNDRAWN = "fast dropout here draws 32 bits (exact); cpuddp's encoder's masks are the hash kernel's or torch's"
# Levers on both paths, and on transformers' models (values other than the
# rule's `off`; why not, or None when in place), in this order.
SHARED = {"embedding_allreduce": _embedding_allreduce, "allreduce": _allreduce,
          "allocator": lambda model, value, parts: allocator.keep_freed()}
TRANSFORMERS = {"attention": _attention, "dropout": _dropout, "dropout_bits": _off(UNDRAWN), "optimizer": _off(INEXACT),
                "dropout_mask": _off(INEXACT), "last_layer": _off(PATCHING), "padding": _off(PATCHING),
                "embedding_grad": _off(PATCHING), "softmax": _off(PATCHING), "grad_buckets": _off(PATCHING),
                **SHARED}


def _encoder_last_layer(model: PackedModel, value, parts: Parts) -> str:
    if not model.encoder.reads_first_tokens:
        return "off: question answering reads every token"
    return "on (first_token)" if model.encoder.first_token_only else f"off ({value})"


def _encoder_embedding_grad(model: PackedModel, value, parts: Parts) -> str:
    if value != "reuse":
        return f"off ({value})"
    model.use_grad_pool(parts.pool)
    return "on (reuse)"


def _encoder_grad_buckets(model: PackedModel, value, parts: Parts) -> str:
    if value != "direct":
        return f"off ({value})"
    parts.views = BucketViews()
    model.use_bucket_views(parts.views)
    return "on (direct)"


def _encoder_dropout_mask(model: PackedModel, value, parts: Parts) -> str:
    return "on (hash)" if model.encoder.kernel is not None else f"off: {model.choices.get('dropout')}"


# cpuddp's encoder: the shared levers and one_pass, each put in place or off with why.
ON_ENCODER = {**SHARED, "optimizer": _optimizer}
# cpuddp's encoder: every value, each the status it reports (its build chose dropout and the last layer).
ENCODER = {"attention": lambda m, v, p: "built in: packed attention on real tokens",
           "padding": lambda m, v, p: "built in: packed real tokens from the loader to the loss",
           "softmax": lambda m, v, p: "built in: fp32, rounded once",
           "dropout": lambda m, v, p: f"built in: {m.choices.get('dropout')}",
           "dropout_bits": lambda m, v, p: "off: the encoder's masks are the hash kernel's (16 bits) or torch's",
           "dropout_mask": _encoder_dropout_mask, "last_layer": _encoder_last_layer,
           "embedding_grad": _encoder_embedding_grad, "grad_buckets": _encoder_grad_buckets}


def _status(put, model, value, parts: Parts, off) -> str:
    if value == off:
        return f"off ({value})"
    why_not = put(model, value, parts)
    return f"on ({value})" if why_not is None else f"off: {why_not}"


def apply(model, chosen, parts: Parts | None = None) -> tuple[Parts, dict[str, str]]:
    """Put every lever of `chosen` (a settings.levers.Levers) in place on
    `model` as it is built; per lever "on", "off", "built in" or "off: <why
    not>" (the model is left as it was for that lever)."""
    from workflow.scripts.settings.levers import RULES

    parts = parts or Parts()
    status = {}
    for name in RULES:
        value = getattr(chosen, name)
        if isinstance(model, PackedModel) and name in ENCODER:
            status[name] = ENCODER[name](model, value, parts)
        else:
            table = ON_ENCODER if isinstance(model, PackedModel) else TRANSFORMERS
            status[name] = _status(table[name], model, value, parts, RULES[name].off)
    return parts, status
