"""The training-step levers change speed, not what is computed: fast dropout
keeps p, is seeded like torch's, and its gradient is the mask's; a last
layer that computes the first token only gives the same logits and
gradients; a reused embedding-gradient table and clipping that skips
a multiply by one give torch's gradients bit for bit."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.tiny_encoders import logits_and_grads, tiny
from workflow.scripts.settings import levers
from workflow.scripts.train import dropout as dropout_lever
from workflow.scripts.train import speed


def test_fast_dropout_keeps_the_probability_and_scale():
    torch.manual_seed(0)
    x = torch.ones(2_000_000)
    out = dropout_lever.fast_dropout(x, p=0.1)
    kept = (out != 0).float().mean().item()
    assert abs(kept - 0.9) < 0.001  # 2e6 draws: the standard error is 0.0002
    assert torch.allclose(out[out != 0], torch.full_like(out[out != 0], 1 / 0.9))


def test_fast_dropout_is_seeded_and_its_gradient_is_the_mask():
    torch.manual_seed(3)
    first = dropout_lever.fast_dropout(torch.ones(1000), p=0.2)
    torch.manual_seed(3)
    x = torch.ones(1000, requires_grad=True)
    second = dropout_lever.fast_dropout(x, p=0.2)
    assert torch.equal(first, second)
    second.sum().backward()
    assert torch.equal(x.grad, second.detach())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fast_dropout_is_where_of_the_same_draws_bit_for_bit(dtype):
    """The one-pass mask x scale gives what where(drop, 0, x * scale) of the
    same int32 draws gives, forward and backward, in fp32 and bf16."""
    x = torch.randn(8, 64, 384).to(dtype).requires_grad_()
    grad = torch.randn(8, 64, 384).to(dtype)
    torch.manual_seed(5)
    out = dropout_lever.fast_dropout(x, p=0.1)
    out.backward(grad)
    torch.manual_seed(5)
    drop = torch.empty(x.shape, dtype=torch.int32).random_() < int(0.1 * dropout_lever.KEEP_SCALE_BITS)
    reference = torch.where(drop, 0.0, x.detach() * (1 / 0.9))
    assert out.dtype == dtype and torch.equal(out, reference)
    assert torch.equal(x.grad, torch.where(drop, 0.0, grad) * (1 / 0.9))


def test_eval_and_p_zero_pass_through():
    x = torch.randn(10)
    assert dropout_lever.fast_dropout(x, 0.1, training=False) is x and dropout_lever.fast_dropout(x, 0.0) is x


def test_fast_dropout_is_put_in_per_model_not_per_process():
    model, other = tiny("Bert", "eager"), tiny("Bert", "eager")
    assert dropout_lever.fast_dropout_modules(model) is None
    assert F.dropout is torch.nn.functional.dropout and not hasattr(F.dropout, "__self__")
    assert not any(type(m) is torch.nn.Dropout for m in model.modules())
    assert model.config._attn_implementation == dropout_lever.FAST_EAGER  # attention's dropout too
    assert any(type(m) is torch.nn.Dropout for m in other.modules())  # another model keeps torch's
    torch.manual_seed(1)
    out = dropout_lever.FastDropout(0.5).train()(torch.ones(10_000))
    assert 0.45 < (out == 0).float().mean() < 0.55


@pytest.mark.parametrize("bits", [16, 8])
def test_narrow_draws_drop_with_p_rounded_to_their_width(bits):
    torch.manual_seed(0)
    draws, threshold, p = dropout_lever.draws_and_threshold(torch.Size([1000, 1000]), 0.1, bits)
    assert p == round(0.1 * 2 ** bits) / 2 ** bits and abs(p - 0.1) <= 2 ** -(bits + 1)
    dropped = (draws < threshold).float().mean().item()
    assert abs(dropped - p) < 0.002  # 1e6 draws: the standard error is 0.0003
    x = torch.ones(1000, 1000)
    out = dropout_lever.fast_dropout(x, 0.1, bits=bits)
    assert abs(out.mean().item() - 1.0) < 0.005  # the scale follows the rounded p: the mean is kept


def test_dropout_bits_reach_the_modules_and_the_attention():
    model = tiny("Bert", "eager")
    assert dropout_lever.set_dropout_bits(model, 16) == "dropout is torch's (train.speed.dropout)"
    dropout_lever.fast_dropout_modules(model)
    assert dropout_lever.set_dropout_bits(model, 16) is None
    assert {m.bits for m in model.modules() if isinstance(m, dropout_lever.FastDropout)} == {16}
    assert model.bert.encoder.layer[0].attention.self.dropout_bits == 16


def test_fast_eager_attention_is_berts_with_the_same_draws():
    """Dropout off (eval), the fast eager attention gives BERT's eager logits."""
    model, reference = tiny("Bert", "eager"), tiny("Bert", "eager")
    dropout_lever.fast_dropout_modules(model)
    batch = {"input_ids": torch.randint(1, 100, (2, 9)), "attention_mask": torch.ones(2, 9, dtype=torch.long)}
    batch["attention_mask"][1, 6:] = 0
    model.eval(), reference.eval()
    assert torch.equal(model(**batch).logits, reference(**batch).logits)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 2e-2)])
def test_fp32_softmax_gives_the_eager_logits_within_rounding(dtype, tolerance):
    """train.speed.softmax fp32: scores scaled and masked by one op, softmax
    in fp32 rounded once: eager BERT's logits within the dtype's rounding."""
    model, reference = tiny("Bert", "eager").to(dtype), tiny("Bert", "eager").to(dtype)
    assert dropout_lever.set_softmax_fp32(model).startswith("the attention is not cpuddp's")
    dropout_lever.fast_dropout_modules(model)
    assert dropout_lever.set_softmax_fp32(model) is None
    batch = {"input_ids": torch.randint(1, 100, (3, 11)), "attention_mask": torch.ones(3, 11, dtype=torch.long)}
    batch["attention_mask"][0, 4:] = 0
    model.eval(), reference.eval()
    got, want = model(**batch).logits.float(), reference(**batch).logits.float()
    assert torch.allclose(got, want, atol=tolerance, rtol=tolerance)


def test_ddp_broadcasts_buffers_only_where_one_changes():
    assert not speed.buffers_change(tiny("Bert", "eager"))  # position ids: constants
    assert speed.buffers_change(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)))
    assert not speed.buffers_change(torch.nn.BatchNorm1d(4, track_running_stats=False))


def test_auto_picks_by_the_stated_rule_and_settings_win():
    chosen, why = levers.choose(levers.Levers())
    assert chosen == levers.Levers("fast", 16, "eager", "rows", "first_token", "reuse", "fp32", "drop", "shm",
                                   "one_pass", "hash")
    assert "auto" in why["dropout"]
    across, why = levers.choose(None, levers.Context(nodes=3))  # the plan models the dense all-reduce across nodes
    assert across.embedding_allreduce == "dense" and "plan" in why["embedding_allreduce"]
    assert levers.choose({"embedding_allreduce": "rows"}, levers.Context(nodes=3))[0].embedding_allreduce == "rows"
    assert levers.choose({}, levers.Context(compression="bf16"))[0].embedding_allreduce == "dense"
    off = levers.Levers("torch", 32, "sdpa", "dense", "all", "torch", "torch", "keep", "backend", "torch", "stored")
    assert levers.choose(levers.all_off())[0] == off
    exact = levers.exact_only()  # the reference of the accuracy judge: inexact levers off, the rest auto
    assert exact.dropout_bits == 32 and exact.dropout == "auto" and levers.choose(exact)[0].dropout == "fast"
    with pytest.raises(ValueError, match="unknown lever"):
        levers.Levers.of({"warp": "on"})


def test_one_path_per_lever_schema_rules_and_apply_agree():
    """A lever is a schema key, a Levers field, a rule and an apply function:
    nothing else lists them."""
    import yaml

    schema = yaml.safe_load(Path("workflow/schemas/config.schema.yaml").read_text())
    keys = list(schema["properties"]["train"]["properties"]["speed"]["properties"])
    assert keys == levers.names() == list(levers.RULES)
    assert set(speed.APPLY) == set(levers.names())
    assert all(schema["properties"]["train"]["properties"]["speed"]["properties"][k]["enum"][0] == "auto"
               and levers.RULES[k].off in schema["properties"]["train"]["properties"]["speed"]["properties"][k]["enum"]
               for k in keys)
    assert set(levers.each_alone()) == set(keys)  # on one node every lever's auto turns it on


def test_apply_says_per_lever_on_or_why_not():
    model = tiny("Bert", "sdpa")
    chosen, _ = levers.choose(levers.Levers())
    parts, status = speed.apply(model, chosen, speed.Parts(is_qa=False))
    assert status.pop("allreduce") == "off: no process group"  # tests/integration/test_node_allreduce.py
    assert all(state.startswith("on") for state in status.values()), status
    assert parts.rows_of is model.get_input_embeddings().weight
    _, status = speed.apply(tiny("Bert", "sdpa"), chosen, speed.Parts(is_qa=True, ipex=True))
    assert status["last_layer"].startswith("off: question answering")
    assert status["embedding_grad"] == "off: IPEX optimizes the model"
    _, status = speed.apply(tiny("Bert", "sdpa"), levers.all_off())
    assert all(state.startswith("off (") for state in status.values())


@pytest.mark.parametrize("kind", ["Bert", "Roberta", "Electra"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_first_token_last_layer_gives_the_same_logits_and_gradients(kind, attention):
    """With dropout off the head sees the same numbers, padded rows included,
    and every weight (the last layer's query and feed-forward too) gets the
    same gradient."""
    batch = {"input_ids": torch.randint(3, 100, (4, 12)), "attention_mask": torch.ones(4, 12, dtype=torch.long),
             "labels": torch.tensor([0, 1, 2, 1])}
    batch["attention_mask"][1, 7:] = 0  # padding, so the mask matters
    batch["attention_mask"][3, 2:] = 0
    model = tiny(kind, attention).eval()  # eval: no dropout, so both paths compute the same
    want_logits, want_grads = logits_and_grads(model, batch)
    assert speed.first_token_last_layer(model) is None
    logits, grads = logits_and_grads(model, batch)
    torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-6)
    assert grads.keys() == want_grads.keys()
    last = f"encoder.layer.{model.config.num_hidden_layers - 1}."
    assert any(last + "intermediate" in n for n in grads)
    for name, grad in want_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_first_token_last_layer_trains_with_dropout_and_leaves_other_heads():
    model = tiny("Bert", "eager").train()
    speed.first_token_last_layer(model)
    out = model(input_ids=torch.randint(3, 100, (2, 10)), labels=torch.tensor([0, 2]))
    out.loss.backward()
    assert out.logits.shape == (2, 3) and torch.isfinite(out.loss)
    import transformers

    qa = transformers.BertForQuestionAnswering(transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64))
    assert "not a first-token classification head" in speed.first_token_last_layer(qa)


@pytest.mark.parametrize("padding_idx", [None, 0])
def test_reused_embedding_grad_is_torchs_bit_for_bit_across_steps_and_accumulation(padding_idx):
    torch.manual_seed(0)
    reused = torch.nn.Embedding(500, 48, padding_idx=padding_idx)
    stock = torch.nn.Embedding(500, 48, padding_idx=padding_idx)
    stock.load_state_dict(reused.state_dict())
    holder = types.SimpleNamespace(get_input_embeddings=lambda: reused, named_parameters=reused.named_parameters)
    assert speed.reuse_embedding_grad(holder) is None
    tables = set()
    for step in range(5):
        for micro in range(1 + step % 2):  # every other step accumulates two micro-batches
            ids = torch.randint(0, 40 if micro == 0 else 500, (8, 30))  # repeated rows, then others
            ids[:, 25:] = 0  # padding
            grad = torch.randn(8, 30, 48)
            (stock(ids) * grad).sum().backward()
            (reused(ids) * grad).sum().backward()
        assert torch.equal(stock.weight.grad, reused.weight.grad), step
        tables.add(reused.weight.grad.data_ptr())
        stock.weight.grad = reused.weight.grad = None  # the optimizer's zero_grad(set_to_none=True)
    assert len(tables) == 1  # every step wrote into the same table: no new pages to fault in


def test_reused_embedding_grad_refuses_a_tied_table_and_leaves_it():
    import transformers

    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=64, tie_word_embeddings=True)
    lm = transformers.BertForMaskedLM(config)
    forward = lm.get_input_embeddings().forward
    assert "tied to" in speed.reuse_embedding_grad(lm)
    assert lm.get_input_embeddings().forward == forward


def test_clipping_is_torchs_and_skips_only_a_multiply_by_one():
    torch.manual_seed(0)
    for scale, clipped in ((1e-3, False), (10.0, True)):
        grads = [torch.randn(30, 7) * scale for _ in range(3)]
        ours, theirs = ([torch.nn.Parameter(torch.zeros(30, 7)) for _ in grads] for _ in range(2))
        for a, b, g in zip(ours, theirs, grads):
            a.grad, b.grad = g.clone(), g.clone()
        assert torch.equal(speed.clip_gradients(ours, 1.0), torch.nn.utils.clip_grad_norm_(theirs, 1.0))
        assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours, theirs))
        assert all(a.grad._version == 0 for a in ours) != clipped  # not written at all when within the norm
        assert any(not torch.equal(a.grad, g) for a, g in zip(ours, grads)) == clipped
