"""train.precision bf16_master (train/master.py): the optimizer's fp32
masters take exactly torch's fused AdamW update, the bf16 weights are the
masters rounded, the head and the loss stay fp32, and a checkpoint's
state brings back the masters, not their bf16 rounding."""

from __future__ import annotations

import torch

from workflow.scripts.train import master
from workflow.scripts.train.master import MasterAdamW


def _tiny_bert():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=40, num_labels=2))


def test_encoder_in_bf16_head_and_loss_in_fp32():
    model = _tiny_bert()
    head = master.to_bf16_encoder(model)
    assert "classifier" in head and "bert" not in head
    assert {p.dtype for p in model.bert.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.classifier.parameters()} == {torch.float32}
    out = model(input_ids=torch.randint(0, 100, (3, 7)), labels=torch.tensor([0, 1, 1]))
    assert out.logits.dtype == torch.float32 and out.loss.dtype == torch.float32
    out.loss.backward()
    assert model.bert.embeddings.word_embeddings.weight.grad.dtype == torch.bfloat16


def _pair(seed: int):
    """A bf16 parameter and an fp32 one, each with a gradient."""
    torch.manual_seed(seed)
    low = torch.nn.Parameter(torch.randn(64, 16).bfloat16())
    full = torch.nn.Parameter(torch.randn(16))
    low.grad, full.grad = torch.randn(64, 16).bfloat16(), torch.randn(16)
    return low, full


def test_masters_take_torchs_fused_adamw_update_exactly():
    low, full = _pair(1)
    masters = [torch.nn.Parameter(low.detach().float()), torch.nn.Parameter(full.detach().clone())]
    masters[0].grad, masters[1].grad = low.grad.float(), full.grad.clone()
    reference = torch.optim.AdamW(masters, lr=1e-2, weight_decay=0.01, fused=True)
    ours = MasterAdamW([{"params": [low, full]}], lr=1e-2, weight_decay=0.01, fused=True)
    assert ours.masters[1] is full  # an fp32 parameter is its own master
    for _ in range(3):
        reference.step()
        ours.step()
        low.grad = masters[0].grad.bfloat16()  # the same gradients again, as DDP would hand them over
        full.grad = masters[1].grad.clone()
    assert torch.equal(ours.masters[0], masters[0]) and torch.equal(full, masters[1])
    assert torch.equal(low, masters[0].bfloat16())  # the bf16 weight is the master rounded to nearest
    assert not torch.equal(ours.masters[0], low.float())  # and the master keeps what bf16 cannot hold


def test_clipping_sees_the_widened_gradients():
    low, full = _pair(2)
    ours = MasterAdamW([{"params": [low, full]}], lr=1e-3, fused=True)
    staged = ours.stage_gradients()
    assert staged[0].grad.dtype == torch.float32 and torch.equal(staged[0].grad, low.grad.float())
    torch.nn.utils.clip_grad_norm_(staged, 0.5)
    before = ours.masters[0].detach().clone()
    ours.step()  # uses the clipped fp32 gradients, not the bf16 ones again
    assert ours.staged is False and not torch.equal(before, ours.masters[0])


def test_state_dict_brings_back_the_masters_and_the_weights():
    low, full = _pair(3)
    ours = MasterAdamW([{"params": [low, full]}], lr=1e-2, fused=True)
    ours.step()
    saved = ours.state_dict()
    again_low, again_full = _pair(3)
    restored = MasterAdamW([{"params": [again_low, again_full]}], lr=1e-2, fused=True)
    restored.load_state_dict(saved)
    assert torch.equal(restored.masters[0], ours.masters[0]) and torch.equal(again_low, low)
    assert torch.equal(restored.state[restored.masters[0]]["exp_avg"], ours.state[ours.masters[0]]["exp_avg"])


def test_the_saved_model_is_the_masters_in_fp32():
    model = _tiny_bert()
    master.to_bf16_encoder(model)
    optimizer = MasterAdamW([{"params": list(model.parameters())}], lr=1e-2, fused=True)
    out = model(input_ids=torch.randint(0, 100, (3, 7)), labels=torch.tensor([0, 1, 1]))
    out.loss.backward()
    optimizer.step()
    masters = [m.detach().clone() for _, m in optimizer.lowered]
    saved = optimizer.fp32_model(model)
    assert {p.dtype for p in saved.parameters()} == {torch.float32}
    assert all(torch.equal(p, m) for (p, _), m in zip(optimizer.lowered, masters, strict=True))
