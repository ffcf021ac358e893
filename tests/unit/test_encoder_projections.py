"""train.speed.projections fused: cpuddp's encoder computes each layer's
query, key and value in one matmul over the three weights side by side
(key and value alone in a first-token last layer). The parameters stay the
three Linears, and the outputs, the loss and every gradient are the three
matmuls' within float rounding, for both heads and every family."""

from __future__ import annotations

import pytest
import torch

from helpers.tiny_family import KINDS, batch, run, tiny_hf
from workflow.scripts.settings import levers
from workflow.scripts.train import encoder, speed

LENGTHS = [12, 7, 12, 3, 9, 7]


def fused(model, on: bool) -> None:
    for layer in model.encoder.layers:
        layer.fused_projections = on


@pytest.mark.parametrize("task", ["classification", "qa"])
@pytest.mark.parametrize("kind", KINDS)
def test_fused_projections_compute_the_three_matmuls(kind, task):
    model, why_not = encoder.build(tiny_hf(kind, task), task, hash_dropout=False)
    assert why_not is None
    model.eval()
    inputs = batch(LENGTHS, 12, task)
    if kind == "DistilBert":
        del inputs["token_type_ids"]
    fused(model, False)
    (values, grads) = run(model, inputs, task)
    fused(model, True)
    (fused_values, fused_grads) = run(model, inputs, task)
    names = {n for n, _ in model.named_parameters()}
    assert {n for n in names if "query" in n or "key" in n or "value" in n}, "the three Linears stay parameters"
    for name, value in values.items():
        torch.testing.assert_close(fused_values[name], value, atol=1e-5, rtol=1e-4, msg=name)
    assert set(fused_grads) == set(grads)
    for name, grad in grads.items():
        torch.testing.assert_close(fused_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_the_lever_puts_it_on_every_layer_and_says_so():
    model, _ = encoder.build(tiny_hf("Bert", "classification"), "classification", hash_dropout=False)
    on = levers.Levers.of({"projections": "fused"})
    _, status = speed.apply(model, levers.choose(on)[0])
    assert status["projections"] == "on (fused)"
    assert all(layer.fused_projections for layer in model.encoder.layers)
    _, status = speed.apply(model, levers.choose(levers.Levers.of({"projections": "separate"}))[0])
    assert status["projections"] == "off (separate)" and not any(x.fused_projections for x in model.encoder.layers)
