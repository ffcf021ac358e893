"""cpuddp's own encoder in bf16, the C attention kernel included, against
transformers (issue 73): with dropout off, in training mode, per family and
head, on a GLUE-like batch padded to 128 tokens (rows of 128, 53 ...), its outputs, loss
and every parameter's gradient are as far from transformers' fp32 numbers
as transformers' own bf16 numbers are, within a factor K.

Both bf16 paths of training: precision bf16 (autocast over fp32 weights),
against transformers under the same autocast; and bf16_master (the
default where the CPU has native bf16: bf16 weights, an fp32 head), against
transformers turned bf16 by the same train/master.to_bf16_encoder, as a
transformers model trains there. (bf16_master's own error is some 5-9x
autocast's on the LayerNorm gradients, for transformers and ours alike: its
norms' weights are bf16, so that is the reference it must meet.)

The error is a norm per tensor: |ours - fp32| <= K |transformers_bf16 -
fp32| + FLOOR |fp32|. FLOOR covers the loss, one number whose bf16 error can
be near zero by chance; a gradient that is zero in exact arithmetic (key
biases, a QA head's bias) is rounding noise on both sides, within K of each
other or within fp32's own rounding (1e-6 of all the gradients' norm; bf16
rounds at 4e-3) where the head stays fp32. Queries and keys are scaled up so that attention is peaked (peaked()):
then a score scaled 3% wrong in the kernel fails here (5x transformers'
error), where a random init's near-uniform attention would hide it. The
model is tiny (hidden 32): the kernel runs as it runs on a big
one (test_encoder_attention.py covers a wide head), and CPUs without native
bf16 run it in a few seconds."""

from __future__ import annotations

import copy

import pytest
import torch

from helpers.tiny_family import KINDS, batch, masked_qa_loss, run, tiny_hf
from workflow.scripts.train import encoder, master
from workflow.scripts.train.encoder.weights import names

K = 2.5  # measured: at most 1.8 over every family, head and path here (the floors aside)
FLOOR = 1e-4
LENGTHS = [128, 53, 17]  # padded to 128, as GLUE batches are: a full row, one of 53, a short one
NO_DROPOUT = {"DistilBert": dict(dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0, qa_dropout=0.0)}
NO_DROPOUT_BERT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def peaked(hf):
    """`hf` with its queries and keys 6x larger: attention as a trained model's is, peaked on a few
    tokens (a random init's is near uniform, and would hide a wrong score or softmax)."""
    with torch.no_grad():
        for name, parameter in hf.named_parameters():
            if name.endswith(("query.weight", "key.weight", "q_lin.weight", "k_lin.weight")):
                parameter.mul_(6.0)
    return hf


@pytest.fixture
def kernel(hash_dropout_kernel):
    if hash_dropout_kernel[0] is None:
        pytest.skip(f"the attention kernel did not build: {hash_dropout_kernel[1]}")
    return hash_dropout_kernel[0]


def counted(kernel, monkeypatch) -> dict:
    """How many times the kernel's attention runs, forward and backward, from now on."""
    calls = {"forward": 0, "backward": 0}
    for name, key in (("attention", "forward"), ("attention_backward", "backward")):
        original = getattr(kernel, name)

        def count(*args, _original=original, _key=key, **kwargs):
            calls[_key] += 1
            return _original(*args, **kwargs)
        monkeypatch.setattr(kernel, name, count)
    return calls


def within(got: torch.Tensor, theirs: torch.Tensor, fp32: torch.Tensor, name: str, noise: float = 0.0) -> None:
    """noise: fp32's own rounding, for a tensor whose exact value is zero."""
    fp32 = fp32.float()
    ours, reference = (got.float() - fp32).norm(), (theirs.float() - fp32).norm()
    relative = f"ours {ours / fp32.norm():.2e}, transformers' bf16 {reference / fp32.norm():.2e} of |fp32|"
    assert ours <= K * reference + FLOOR * fp32.norm() + noise, f"{name}: {relative}"


@pytest.mark.parametrize("precision", ["bf16", "bf16_master"])
@pytest.mark.parametrize("task", ["classification", "qa"])
@pytest.mark.parametrize("kind", KINDS)
def test_bf16_training_with_the_kernel_is_transformers_within_bf16s_error(kind, task, precision, kernel, monkeypatch):
    hf = peaked(tiny_hf(kind, task, max_position_embeddings=160, **NO_DROPOUT.get(kind, NO_DROPOUT_BERT))).train()
    inputs = batch(LENGTHS, 128, task)
    if kind == "DistilBert":
        del inputs["token_type_ids"]
    loss = masked_qa_loss(inputs) if task == "qa" else None
    fp32 = run(hf, inputs, task, loss)
    model, _ = encoder.build(hf, task, hash_dropout=True)
    assert model.encoder.kernel is kernel
    calls = counted(kernel, monkeypatch)
    if precision == "bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            theirs = run(hf, inputs, task, loss)
            ours = run(model.train(), inputs, task)
    else:
        low = copy.deepcopy(hf)
        master.to_bf16_encoder(low)
        theirs = run(low, inputs, task, loss)
        master.to_bf16_encoder(model)
        ours = run(model.train(), inputs, task)
    layers = len(model.encoder.layers)
    assert calls == {"forward": layers, "backward": layers}  # the C kernel, not torch's path
    for name, value in fp32[0].items():
        within(ours[0][name], theirs[0][name], value, name)
    mapping = names(model, hf.base_model_prefix)
    assert {mapping[n] for n in ours[1]} == set(fp32[1])
    noise = 1e-6 * torch.cat([grad.flatten() for grad in fp32[1].values()]).norm()
    for name, grad in ours[1].items():
        within(grad, theirs[1][mapping[name]], fp32[1][mapping[name]], name, noise)
