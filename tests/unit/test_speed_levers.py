"""The training-step levers change speed, not what is computed: fast dropout
keeps p, is seeded like torch's, and its gradient is the mask's; a reused
embedding-gradient table and clipping that skips a multiply by one give
torch's gradients bit for bit. On transformers' models only exact levers
that replace no forward are on; on cpuddp's encoder the model levers are
its own choices (its first-token last layer: tests/unit/test_encoder_equal.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.tiny_encoders import tiny
from helpers.tiny_family import tiny_hf
from workflow.scripts.settings import levers
from workflow.scripts.train import dropout as dropout_lever
from workflow.scripts.train import encoder, speed
from workflow.scripts.train.embedding_grad import GradPool, _ReusedGradEmbedding
from workflow.scripts.train.encoder.guard import replaced_forwards


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
    assert replaced_forwards(model) == []  # modules swapped as the model is built: no forward replaced
    assert any(type(m) is torch.nn.Dropout for m in other.modules())  # another model keeps torch's
    torch.manual_seed(1)
    out = dropout_lever.FastDropout(0.5).train()(torch.ones(10_000))
    assert 0.45 < (out == 0).float().mean() < 0.55


def test_ddp_broadcasts_buffers_only_where_one_changes():
    assert not speed.buffers_change(tiny("Bert", "eager"))  # position ids: constants
    assert speed.buffers_change(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)))
    assert not speed.buffers_change(torch.nn.BatchNorm1d(4, track_running_stats=False))


def test_auto_picks_by_the_stated_rule_and_settings_win():
    chosen, why = levers.choose(levers.Levers())
    assert chosen == levers.Levers("fast", 16, "eager", "rows", "first_token", "reuse", "direct", "fp32", "drop", "shm",
                                   "one_pass", "hash", "keep")
    assert "auto" in why["dropout"]
    # the plan models the dense all-reduce across nodes
    across, why = levers.choose(levers.Levers(), levers.Context(nodes=3))
    assert across.embedding_allreduce == "dense" and "plan" in why["embedding_allreduce"]
    rows = levers.Levers.of({"embedding_allreduce": "rows"})
    assert levers.choose(rows, levers.Context(nodes=3))[0].embedding_allreduce == "rows"
    assert levers.choose(levers.Levers(), levers.Context(compression="bf16"))[0].embedding_allreduce == "dense"
    off = levers.Levers("torch", 32, "sdpa", "dense", "all", "torch", "copy", "torch", "keep", "backend", "torch",
                        "stored", "system")
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
    assert set(speed.TRANSFORMERS) == set(speed.ENCODER | speed.ON_ENCODER) == set(levers.names())
    assert all(schema["properties"]["train"]["properties"]["speed"]["properties"][k]["enum"][0] == "auto"
               and levers.RULES[k].off in schema["properties"]["train"]["properties"]["speed"]["properties"][k]["enum"]
               for k in keys)
    assert set(levers.each_alone()) == set(keys)  # on one node every lever's auto turns it on


def test_on_transformers_models_only_exact_levers_that_replace_no_forward():
    model = tiny("Bert", "sdpa")
    chosen, _ = levers.choose(levers.Levers())
    parts, status = speed.apply(model, chosen)
    assert status.pop("allreduce") == "off: no process group"  # tests/integration/test_node_allreduce.py
    on = {name for name, state in status.items() if state.startswith("on")}
    assert on == {"attention", "dropout", "embedding_allreduce", "allocator"}, status
    assert all(levers.RULES[name].exact for name in on)
    assert status["optimizer"] == f"off: {speed.INEXACT}"
    assert status["padding"] == f"off: {speed.PATCHING}" and status["dropout_bits"] == f"off: {speed.UNDRAWN}"
    assert parts.rows_of is model.get_input_embeddings().weight
    assert replaced_forwards(model) == []
    _, status = speed.apply(tiny("Bert", "sdpa"), levers.all_off())
    assert all(state.startswith("off (") for state in status.values())


@pytest.mark.parametrize("task", ["classification", "qa"])
def test_on_cpuddps_encoder_the_model_levers_are_its_own_choices(task):
    chosen, _ = levers.choose(levers.Levers())
    model, _ = encoder.build(tiny_hf("Roberta", task), task, hash_dropout=True)
    parts, status = speed.apply(model, chosen)
    assert status["padding"].startswith("built in") and status["softmax"].startswith("built in")
    assert status["embedding_grad"] == "on (reuse)" and model.encoder.grad_pool is parts.pool
    assert status["grad_buckets"] == "on (direct)" and model.encoder.bucket_views is parts.views is not None
    assert status["last_layer"] == ("on (first_token)" if task == "classification"
                                    else "off: question answering reads every token")
    assert parts.rows_of is model.encoder.embeddings.word.weight
    assert replaced_forwards(model) == []


@pytest.mark.parametrize("padding_idx", [None, 0])
def test_reused_embedding_grad_is_torchs_bit_for_bit_across_steps_and_accumulation(padding_idx):
    torch.manual_seed(0)
    reused = torch.nn.Embedding(500, 48, padding_idx=padding_idx)
    stock = torch.nn.Embedding(500, 48, padding_idx=padding_idx)
    stock.load_state_dict(reused.state_dict())
    pool = GradPool()

    def embed(ids):  # as cpuddp's encoder embeds with embedding_grad reuse (encoder/layers.py)
        return _ReusedGradEmbedding.apply(ids, reused.weight, padding_idx, pool)

    tables = set()
    for step in range(5):
        for micro in range(1 + step % 2):  # every other step accumulates two micro-batches
            ids = torch.randint(0, 40 if micro == 0 else 500, (8, 30))  # repeated rows, then others
            ids[:, 25:] = 0  # padding
            grad = torch.randn(8, 30, 48)
            (stock(ids) * grad).sum().backward()
            (embed(ids) * grad).sum().backward()
        assert torch.equal(stock.weight.grad, reused.weight.grad), step
        tables.add(reused.weight.grad.data_ptr())
        stock.weight.grad = reused.weight.grad = None  # the optimizer's zero_grad(set_to_none=True)
    assert len(tables) == 1  # every step wrote into the same table: no new pages to fault in


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
