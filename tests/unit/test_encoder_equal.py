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

from helpers.tiny_family import KINDS, batch, masked_qa_loss, run, tiny_hf
from workflow.scripts.data.batching import packed_collate, pad_collate, padded_rows
from workflow.scripts.train import encoder
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


def loss_and_grads(model, inputs: dict) -> tuple[torch.Tensor, dict]:
    model.zero_grad()
    out = model(**inputs)
    out.loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("task", ["classification", "qa"])
def test_packed_input_gives_what_the_padded_batch_gives(task):
    """input_ids [tokens] with cu_seqlens: the same outputs, loss and gradients as the padded batch."""
    model, _ = ours_and_theirs("Roberta", task)
    inputs = batch(LENGTHS, 12, task)
    real = inputs["attention_mask"].bool()
    packed = {key: (value[real] if key in ("input_ids", "token_type_ids") else value)
              for key, value in inputs.items() if key != "attention_mask"}
    packed["cu_seqlens"] = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()])
    padded, want = loss_and_grads(model, inputs)
    out, grads = loss_and_grads(model, packed)
    torch.testing.assert_close(out.loss, padded.loss, atol=1e-6, rtol=1e-5)
    if task == "qa":  # [tokens], packed in the batch's order
        torch.testing.assert_close(out.start_logits, padded.start_logits[real], atol=1e-6, rtol=1e-5)
    else:
        torch.testing.assert_close(out.logits, padded.logits, atol=1e-6, rtol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, want[name], atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("task", ["classification", "qa"])
@pytest.mark.parametrize("kind", ["Bert", "Roberta", "DistilBert"])
def test_the_training_loaders_packed_batch_trains_as_the_padded_one(kind, task):
    """The encoder's loader (packed_collate: longest first, no padding, no
    attention_mask) gives the loss and gradients of the padded batch."""
    model, _ = ours_and_theirs(kind, task)
    inputs = batch(LENGTHS, 12, task)
    if kind == "DistilBert":
        del inputs["token_type_ids"]
    rows = padded_rows(inputs)
    packed = packed_collate()(rows)
    assert "attention_mask" not in packed and packed["input_ids"].shape == (sum(LENGTHS),)
    padded, want = loss_and_grads(model, pad_collate(1)(rows))
    out, grads = loss_and_grads(model, packed)
    torch.testing.assert_close(out.loss, padded.loss, atol=1e-6, rtol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, want[name], atol=1e-6, rtol=1e-5, msg=name)


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


@pytest.mark.parametrize("task", ["classification", "qa"])
def test_scoring_gives_the_encoder_packed_batches_and_each_row_its_outputs(task):
    """Evaluation (during training, and evaluate_fp32's code) packs for the encoder
    too: each row's outputs in dataset order equal the padded batch's at its real tokens."""
    import contextlib

    import datasets

    from workflow.scripts.common.modeling import takes_packed
    from workflow.scripts.data.scoring import forward_all

    model, hf = ours_and_theirs("Bert", task)
    inputs = batch(LENGTHS, 12, task)
    rows = [{k: v for k, v in row.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
            for row in padded_rows(inputs)]
    assert takes_packed(model) and not takes_packed(hf)
    outputs, _ = forward_all(model, datasets.Dataset.from_list(rows), 4, 1, contextlib.nullcontext)
    with torch.no_grad():
        want = model(**{k: inputs[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    for i, n in enumerate(LENGTHS):
        if task == "qa":
            torch.testing.assert_close(torch.from_numpy(outputs[i][0]), want.start_logits[i, :n], atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(torch.from_numpy(outputs[i][1]), want.end_logits[i, :n], atol=1e-6, rtol=1e-5)
        else:
            torch.testing.assert_close(torch.from_numpy(outputs[i]), want.logits[i], atol=1e-6, rtol=1e-5)
