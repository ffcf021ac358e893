"""The packed encoder under train.precision bf16_master (a bf16 encoder, an
fp32 head widened by train/master.py): it runs, its logits and gradients
are the fp32 ones within bf16's rounding, through torch's attention and the
hash kernel's one-node attention alike; in training, dropout follows the
config's probabilities, from torch or from the kernel."""

from __future__ import annotations

import pytest
import torch

from helpers.tiny_family import batch, run, tiny_hf
from workflow.scripts.train import encoder, master
from workflow.scripts.train.encoder import layers
from workflow.scripts.train.encoder.packing import bucketed_rows

LENGTHS = [12, 7, 12, 3, 9, 7]


def close_in_bf16(got: tuple[dict, dict], want: tuple[dict, dict]) -> None:
    (values, grads), (want_values, want_grads) = got, want
    for name, value in want_values.items():
        torch.testing.assert_close(values[name].float(), value, atol=3e-2, rtol=3e-2, msg=name)
    assert grads.keys() == want_grads.keys()
    # Relative to its size (bf16 keeps 8 bits; sums of many rows round often), and 2e-4 for a gradient
    # that is zero in exact arithmetic (a QA loss gives the last norm's bias none).
    for name, grad in want_grads.items():
        assert (grads[name].float() - grad).norm() <= 0.08 * grad.norm() + 2e-4, name


@pytest.mark.parametrize("hash_dropout", [False, True])
@pytest.mark.parametrize("task", ["classification", "qa"])
def test_bf16_encoder_gives_the_fp32_numbers_within_bf16_rounding(task, hash_dropout, hash_dropout_kernel):
    if hash_dropout and hash_dropout_kernel[0] is None:
        pytest.skip(f"the dropout kernel did not build: {hash_dropout_kernel[1]}")
    model, _ = encoder.build(tiny_hf("Bert", task), task, hash_dropout=hash_dropout)
    inputs = batch(LENGTHS, 12, task)
    want = run(model.eval(), inputs, task)
    head = master.to_bf16_encoder(model)
    assert head == ["head"] and model.encoder.layers[0].query.weight.dtype == torch.bfloat16
    got = run(model, inputs, task)
    assert got[0]["loss"].dtype == torch.float32 and model.head.out.weight.dtype == torch.float32
    close_in_bf16(got, want)


@pytest.mark.parametrize("hash_dropout", [False, True])
def test_training_draws_dropout_at_the_configs_probabilities(hash_dropout, hash_dropout_kernel):
    if hash_dropout and hash_dropout_kernel[0] is None:
        pytest.skip(f"the dropout kernel did not build: {hash_dropout_kernel[1]}")
    hf = tiny_hf("Roberta", "classification", hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.2)
    model, _ = encoder.build(hf, "classification", hash_dropout=hash_dropout)
    layer = model.encoder.layers[0]
    assert (layer.p, layer.p_attention, model.head.p) == (0.3, 0.2, 0.3)
    master.to_bf16_encoder(model)
    inputs = batch(LENGTHS, 12, "classification")
    model.eval()
    quiet = model(**inputs).logits
    model.train()
    torch.manual_seed(5)
    first = run(model, inputs, "classification")
    torch.manual_seed(5)
    again = run(model, inputs, "classification")
    assert not torch.allclose(first[0]["logits"], quiet)  # dropout on
    for name, value in first[1].items():  # a seed gives the same masks, forward and backward
        assert torch.equal(value, again[1][name]), name


def test_distilbert_reads_its_own_dropout_names():
    hf = tiny_hf("DistilBert", "qa", dropout=0.15, attention_dropout=0.25, qa_dropout=0.35)
    model, _ = encoder.build(hf, "qa", hash_dropout=False)
    layer = model.encoder.layers[0]
    assert (layer.p, layer.p_attention, layer.p_attention_output, model.head.p) == (0.15, 0.25, 0.0, 0.35)


def test_bucketed_rows_recur_and_pad_little():
    assert [bucketed_rows(n) for n in (1, 8, 9, 50, 210, 800, 801, 4000)] == [8, 8, 16, 56, 216, 800, 832, 4096]
    assert all(n <= bucketed_rows(n) < n + max(8, n / 16) for n in range(1, 5000))
    assert len({bucketed_rows(n) for n in range(600, 1000)}) == 14  # a task's range: a dozen matmul shapes


def rows_seen(model) -> list[int]:
    """The row counts the first layer's FFN matmul is called with, as the model runs."""
    seen = []
    model.encoder.layers[0].ffn_in.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    return seen


@pytest.mark.parametrize("task", ["classification", "qa"])
def test_bucketed_rows_change_no_number(task, monkeypatch, hash_dropout_kernel):
    """Training's bf16 forward and backward, the hash kernel's dropout on, with
    the rows padded (50 tokens -> 56) and without: the same numbers, up to the
    order of sums (the kernel's masks follow each element's index; torch's
    dropout would draw the padded rows' masks too and shift the rest)."""
    if hash_dropout_kernel[0] is None:
        pytest.skip(f"the dropout kernel did not build: {hash_dropout_kernel[1]}")
    hf = tiny_hf("Bert", task, hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.1)
    model, _ = encoder.build(hf, task, hash_dropout=True)
    master.to_bf16_encoder(model)
    seen = rows_seen(model)
    inputs = batch(LENGTHS, 12, task)
    assert bucketed_rows(sum(LENGTHS)) == 56
    model.train()
    torch.manual_seed(3)
    padded = run(model, inputs, task)
    monkeypatch.setattr(layers, "bucketed_rows", lambda tokens: tokens)
    torch.manual_seed(3)
    plain = run(model, inputs, task)
    assert seen == [56, 50]
    for name, value in plain[0].items():
        torch.testing.assert_close(padded[0][name], value, atol=1e-2, rtol=1e-2, msg=name)
    assert padded[1].keys() == plain[1].keys()
    for name, grad in plain[1].items():
        assert (padded[1][name].float() - grad.float()).norm() <= 0.02 * grad.norm() + 1e-4, name


def test_rows_are_padded_where_the_matmuls_run_in_bf16_only():
    """bf16 autocast over fp32 weights pads as bf16 weights do; fp32 does not
    (MKL compiles nothing per shape). ELECTRA's projection gets the padded rows."""
    model, _ = encoder.build(tiny_hf("Electra", "classification"), "classification",  # embeddings 16 wide
                             hash_dropout=False)
    seen = rows_seen(model)
    project = []
    model.encoder.embeddings.project.register_forward_hook(lambda m, args, out: project.append(args[0].shape[0]))
    inputs = batch(LENGTHS, 12, "classification")
    model.eval()
    with torch.no_grad():
        model(**inputs)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(**inputs)
    assert seen == [50, 56] and project == [50, 56]


def test_padded_rows_are_never_sliced_off_or_padded_again(hash_dropout_kernel):
    """With the attention kernel, the padded rows (bucketed_rows) go through every layer as they are:
    no slice of the tokens (whose backward zero-fills a [rows, hidden] gradient each) and no pad of the
    context (a copy each way), forward or backward."""
    if hash_dropout_kernel[0] is None:
        pytest.skip(f"the dropout kernel did not build: {hash_dropout_kernel[1]}")
    model, _ = encoder.build(tiny_hf("Bert", "classification"), "classification", hash_dropout=True)
    master.to_bf16_encoder(model)
    model.train()
    inputs = batch(LENGTHS, 12, "classification")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run(model, inputs, "classification")
    calls = {event.key: event.count for event in prof.key_averages()}
    assert "PackedAttentionBackward" in calls and bucketed_rows(sum(LENGTHS)) > sum(LENGTHS)
    assert "aten::slice_backward" not in calls
    assert calls["aten::constant_pad_nd"] == 2  # the embeddings' output padded once for every layer, and its backward
