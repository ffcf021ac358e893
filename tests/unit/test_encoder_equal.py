"""cpuddp's own encoder (workflow/scripts/train/encoder/) computes what
transformers computes: at fp32 with dropout off, per architecture of the
BERT family and for both heads, the outputs, the loss and every parameter's
gradient equal transformers' within float tolerance, on padded batches of
varied lengths. QA: transformers also computes logits for padding tokens
and its loss includes them; ours leaves padding out, so the reference is
transformers' logits at real positions under the same loss."""

from __future__ import annotations

import pytest
import torch

from helpers.tiny_family import KINDS, batch, run, tiny_hf
from workflow.scripts.train import encoder
from workflow.scripts.train.encoder.heads import qa_loss
from workflow.scripts.train.encoder.weights import names

LENGTHS = [12, 7, 12, 3, 9, 7]  # padded to 12: 50 real tokens of 72; two pairs of equal lengths


def ours_and_theirs(kind: str, task: str, **kwargs):
    hf = tiny_hf(kind, task, **kwargs)
    model, why_not = encoder.build(hf, task, hash_dropout=False)
    assert why_not is None
    return model.eval(), hf


def assert_equal(ours: tuple[dict, dict], theirs: tuple[dict, dict], mapping: dict[str, str]) -> None:
    (values, grads), (want_values, want_grads) = ours, theirs
    for name, value in want_values.items():
        torch.testing.assert_close(values[name], value, atol=1e-5, rtol=1e-4, msg=name)
    assert {mapping[n] for n in grads} == set(want_grads)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, want_grads[mapping[name]], atol=1e-5, rtol=1e-4, msg=name)


def masked_qa_loss(inputs: dict):
    """Our QA loss on transformers' logits, padding left out as ours leaves it."""
    def loss(out):
        padding = inputs["attention_mask"] == 0
        lowest = torch.finfo(out.start_logits.dtype).min
        return qa_loss(out.start_logits.masked_fill(padding, lowest), out.end_logits.masked_fill(padding, lowest),
                       inputs["start_positions"], inputs["end_positions"])
    return loss


@pytest.mark.parametrize("task", ["classification", "qa"])
@pytest.mark.parametrize("kind", KINDS)
def test_outputs_loss_and_gradients_are_transformers(kind, task):
    model, hf = ours_and_theirs(kind, task)
    inputs = batch(LENGTHS, 12, task)
    if kind == "DistilBert":
        del inputs["token_type_ids"]  # DistilBERT takes none
    theirs = run(hf, inputs, task, masked_qa_loss(inputs) if task == "qa" else None)
    assert_equal(run(model, inputs, task), theirs, names(model, hf.base_model_prefix))


@pytest.mark.parametrize("kind", ["Bert", "Roberta"])
def test_without_padding_the_qa_loss_is_transformers_own(kind):
    model, hf = ours_and_theirs(kind, "qa")
    inputs = batch([10, 10, 10], 10, "qa")
    assert_equal(run(model, inputs, "qa"), run(hf, inputs, "qa"), names(model, hf.base_model_prefix))


@pytest.mark.parametrize("labels, problem", [("regression", "regression"), ("multi", "multi_label_classification"),
                                             ("single", None)])
@pytest.mark.parametrize("kind", ["Bert", "Electra", "DistilBert"])
def test_every_problem_type_has_transformers_loss(kind, labels, problem):
    num_labels = 1 if labels == "regression" else 3
    model, hf = ours_and_theirs(kind, "classification", num_labels=num_labels, problem_type=problem)
    inputs = batch(LENGTHS, 12, "classification", labels=labels)
    inputs.pop("token_type_ids")
    assert_equal(run(model, inputs, "classification"), run(hf, inputs, "classification"),
                 names(model, hf.base_model_prefix))


@pytest.mark.parametrize("task", ["classification", "qa"])
def test_packed_input_gives_what_the_padded_batch_gives(task):
    """input_ids [tokens] with cu_seqlens: the same numbers as the padded batch."""
    model, _ = ours_and_theirs("Roberta", task)
    inputs = batch(LENGTHS, 12, task)
    real = inputs["attention_mask"].bool()
    packed = {key: inputs[key][real] for key in ("input_ids", "token_type_ids")}
    packed["cu_seqlens"] = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()])
    padded = model(**{k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask", "token_type_ids")})
    out = model(**packed)
    if task == "qa":  # [sequences, longest]: here the batch's own width
        torch.testing.assert_close(out.start_logits[real], padded.start_logits[real], atol=1e-6, rtol=1e-5)
    else:
        torch.testing.assert_close(out.logits, padded.logits, atol=1e-6, rtol=1e-5)


def test_the_last_layer_of_a_classifier_computes_first_tokens_only():
    """Keys and values from all 50 tokens; query, output and feed-forward for the 6 first tokens."""
    model, _ = ours_and_theirs("Bert", "classification")
    seen = []
    for layer in model.encoder.layers:
        layer.ffn_in.register_forward_hook(lambda module, args, out: seen.append(tuple(args[0].shape)))
        layer.key.register_forward_hook(lambda module, args, out: seen.append(tuple(args[0].shape)))
    model(**batch(LENGTHS, 12, "classification"))
    assert seen == [(50, 32)] * 5 + [(6, 32)]


def test_right_padding_is_required():
    model, _ = ours_and_theirs("Bert", "classification")
    inputs = batch(LENGTHS, 12, "classification")
    inputs["attention_mask"] = inputs["attention_mask"].flip(1)
    with pytest.raises(ValueError, match="right-padded"):
        model(**inputs)
