"""train.lora (train/lora.py): the target modules auto picks per
architecture, the head that trains in full, the model code it takes, the
levers under peft's wrapper, bf16_master's masters, the scaling plan's
gradient bytes against real DDP's buckets, and the config check."""

from __future__ import annotations

import pytest
import torch

from helpers.tiny_encoders import tiny
from helpers.tiny_family import tiny_hf
from helpers.one_rank import one_rank_group
from workflow.scripts.common.errors import UserError
from workflow.scripts.settings import config as cfg
from workflow.scripts.settings import levers
from workflow.scripts.settings.views import Lora
from workflow.scripts.train import lora, master, model_code, speed
from workflow.scripts.train.encoder.guard import replaced_forwards


def decoder(kind: str):
    import transformers

    small = {"vocab_size": 100, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if kind == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, **small)
        return transformers.GPT2ForSequenceClassification(config)
    config = transformers.Qwen2Config(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                      num_key_value_heads=1, intermediate_size=64, **small)
    return transformers.Qwen2ForSequenceClassification(config)


@pytest.mark.parametrize("kind, targets, head", [
    ("Bert", ["query", "value"], ["classifier"]), ("Roberta", ["query", "value"], ["classifier"]),
    ("Electra", ["query", "value"], ["classifier"]),
    ("DistilBert", ["q_lin", "v_lin"], ["pre_classifier", "classifier"]),
])
def test_auto_targets_the_attentions_query_and_value_of_encoders(kind, targets, head):
    model = tiny_hf(kind, "classification")
    assert lora.target_modules("auto", model)[0] == targets
    assert lora.head_modules(model) == head
    assert lora.head_modules(tiny_hf(kind, "qa")) == ["qa_outputs"]


@pytest.mark.parametrize("kind, targets", [("gpt2", ["c_attn"]), ("qwen2", ["q_proj", "v_proj"])])
def test_auto_targets_the_projections_of_decoders(kind, targets):
    model = decoder(kind)
    assert lora.target_modules("auto", model) == (targets, f"auto: peft's table for {kind}")
    assert lora.head_modules(model) == ["score"]


def test_named_targets_must_exist():
    model = tiny_hf("Bert", "classification")
    assert lora.target_modules(("query", "key"), model) == (["query", "key"], "as set")
    with pytest.raises(UserError, match="q_proj not found in the model"):
        lora.target_modules(("q_proj",), model)


def test_only_adapters_and_head_train_and_merge_gives_a_plain_model():
    model, line = lora.apply(tiny_hf("Bert", "classification"), Lora(r=2))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or "classifier.modules_to_save" in n for n in trainable)
    assert "r 2, alpha 16, dropout 0.1 on query, value" in line and "head classifier trains in full" in line
    assert lora.apply(model, None) == (model, None)
    merged = lora.saved(model, Lora())
    assert type(merged).__name__ == "BertForSequenceClassification"
    assert not [n for n in merged.state_dict() if "lora_" in n or "modules_to_save" in n]


def test_lora_takes_transformers_model_code():
    chosen, _ = levers.choose(levers.Levers())
    model, choice = model_code.build("auto", tiny_hf("Bert", "classification"), False, False, chosen, lora=True)
    assert choice.code == "transformers" and "train.lora" in choice.why
    with pytest.raises(UserError, match="cpuddp cannot train train.lora"):
        model_code.build("cpuddp", tiny_hf("Bert", "classification"), False, False, chosen, lora=True)


def test_levers_under_peft_apply_or_say_why_not():
    model, _ = lora.apply(tiny("Bert", "sdpa"), Lora())
    chosen, _ = levers.choose(levers.Levers())
    parts, status = speed.apply(model, chosen)
    assert status["embedding_allreduce"].startswith("off: the word embedding is frozen (train.lora)")
    assert parts.rows_of is None
    assert status["attention"] == f"on ({chosen.attention})" and status["dropout"] == "on (fast)"
    assert model.get_base_model().config._attn_implementation == chosen.attention
    assert replaced_forwards(model) == []  # peft wraps modules in its own; no forward is replaced


def test_bf16_master_keeps_masters_of_the_trainable_parameters_only():
    model, _ = lora.apply(tiny_hf("Bert", "classification"), Lora())
    optimizer, _ = master.step_parts(model, "bf16_master")
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert [id(p) for p in optimizer.model_params] == [id(p) for p in trainable]
    adapters = [p for n, p in model.named_parameters() if "lora_" in n]
    assert all(p.dtype == torch.bfloat16 for p in adapters) and len(optimizer.lowered) == len(adapters)
    assert model.get_base_model().classifier.modules_to_save["default"].weight.dtype == torch.float32


def test_the_plan_counts_the_adapters_bytes_as_ddp_reduces_them(tiny_model_dir):
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workflow.scripts.plan import compress_cost
    from workflow.scripts.plan import profile as measure
    from workflow.scripts.plan.scaling_model import buckets
    from workflow.scripts.train.comm import CommTimer

    def build():
        return lora.apply(measure.build_model(str(tiny_model_dir), "mrpc"), Lora())[0]

    model = build()
    batch = measure.random_batch(model, 4, 16, qa=False)
    grads = measure.measure(model, batch, steps=2, warmup=1, precision="fp32")["grads"]
    trainable = sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
    assert sum(b for b, _ in grads) == trainable < sum(p.numel() * 4 for p in model.parameters()) // 50
    assert compress_cost.measure(model)["powersgd_ratio"] > 0
    with one_rank_group():  # left once the DDP model is gone
        ddp = DDP(build(), gradient_as_bucket_view=True, bucket_cap_mb=0.01)
        timer = CommTimer(warmup=1)
        ddp.register_comm_hook(timer, CommTimer.hook)
        for _ in range(4):
            timer.begin_update()
            timer.backward(ddp(**batch).loss)
        seen = [b["bytes"] for b in timer.step_split()["buckets"]]
        del ddp
    assert seen == [b for b, _ in buckets(grads, 0.01)] and sum(seen) == trainable


BASE = {"experiment": "x", "task": "mrpc", "model": "some/model"}


def test_config_check_says_what_lora_cannot_do_in_one_line():
    def error(**overrides) -> str:
        with pytest.raises(cfg.ConfigError) as err:
            cfg.validate({**BASE, **overrides})
        assert "\n" not in str(err.value)
        return str(err.value)

    assert cfg.validate({**BASE, "train": {"lora": {}}})["train"]["lora"] == {
        "r": 8, "alpha": 16, "dropout": 0.1, "target_modules": "auto", "merge": True}
    assert cfg.validate(BASE)["train"]["lora"] is None
    assert "use auto or a list of module names" in error(train={"lora": {"target_modules": "query"}})
    assert "set quantization.enabled false or train.lora.merge true" in error(
        train={"lora": {"merge": False}}, quantization={"enabled": True})
    assert cfg.validate({**BASE, "train": {"lora": {"merge": False, "target_modules": ["query"]}}})


@pytest.fixture
def data_dir(tmp_path):
    import datasets

    torch.manual_seed(0)
    ids = [[101] + torch.randint(1000, 2000, (3 + i % 7,)).tolist() + [102] for i in range(16)]
    rows = {"input_ids": ids, "attention_mask": [[1] * len(r) for r in ids],
            "token_type_ids": [[0] * len(r) for r in ids], "labels": [i % 2 for i in range(16)]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(tmp_path / "data")
    return str(tmp_path / "data")


@pytest.mark.parametrize("precision", ["fp32", "bf16_master"])
def test_the_built_state_trains_the_adapters_and_head_alone(tiny_model_dir, data_dir, precision):
    import logging

    from workflow.scripts.launch.ranks import DistEnv
    from workflow.scripts.settings.decisions import RunDecisions
    from workflow.scripts.settings.views import TrainView
    from workflow.scripts.train.loop import train_step
    from workflow.scripts.train.state import build

    cfg = TrainView.of({"task": "mrpc", "model": str(tiny_model_dir),
                        "train": {"batch_size": 4, "max_steps": 2, "lora": {"r": 2}}})
    decisions = RunDecisions("gloo", precision, 1, 1, 1, levers=levers.choose(levers.Levers())[0])
    with one_rank_group():  # left once the DDP model is gone
        state, _ = build(cfg, decisions, data_dir, DistEnv(0, 1, 0, 1, "none"), logging.getLogger("test_lora"))
        assert state.choice.code == "transformers" and lora.is_wrapped(state.model)
        trainable = {id(p) for p in state.model.parameters() if p.requires_grad}
        held = [p for g in state.optimizer.param_groups for p in g["params"]]
        held = state.optimizer.model_params if precision == "bf16_master" else held
        assert {id(p) for p in held} == trainable
        assert "token_type_ids" in next(iter(state.loader))  # the columns of the model inside peft's wrapper
        before = {n: p.detach().clone() for n, p in state.model.named_parameters()}
        state.ddp_model.train()
        train_step(state, [next(iter(state.loader))])
        moved = {n for n, p in state.model.named_parameters() if not torch.equal(before[n], p)}
        assert moved and all("lora_" in n or "modules_to_save" in n for n in moved), moved
        del state
