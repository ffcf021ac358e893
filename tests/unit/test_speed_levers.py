"""The training-step levers change speed, not what is computed: fast dropout
keeps p, is seeded like torch's, and its gradient is the mask's."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workflow.scripts.common import levers
from workflow.scripts.train import speed


def test_fast_dropout_keeps_the_probability_and_scale():
    torch.manual_seed(0)
    x = torch.ones(2_000_000)
    out = speed.fast_dropout(x, p=0.1)
    kept = (out != 0).float().mean().item()
    assert abs(kept - 0.9) < 0.001  # 2e6 draws: the standard error is 0.0002
    assert torch.allclose(out[out != 0], torch.full_like(out[out != 0], 1 / 0.9))


def test_fast_dropout_is_seeded_and_its_gradient_is_the_mask():
    torch.manual_seed(3)
    first = speed.fast_dropout(torch.ones(1000), p=0.2)
    torch.manual_seed(3)
    x = torch.ones(1000, requires_grad=True)
    second = speed.fast_dropout(x, p=0.2)
    assert torch.equal(first, second)
    second.sum().backward()
    assert torch.equal(x.grad, second.detach())


def test_eval_and_p_zero_pass_through():
    x = torch.randn(10)
    assert speed.fast_dropout(x, 0.1, training=False) is x and speed.fast_dropout(x, 0.0) is x


def test_use_dropout_routes_nn_dropout_and_back():
    layer = torch.nn.Dropout(0.5)
    try:
        speed.use_dropout("fast")
        assert F.dropout is speed.fast_dropout
        torch.manual_seed(1)
        out = layer(torch.ones(10_000))
        assert 0.45 < (out == 0).float().mean() < 0.55
    finally:
        speed.use_dropout("torch")
    assert F.dropout is speed._TORCH_DROPOUT


def test_auto_picks_by_the_stated_rule_and_settings_win():
    auto = levers.choose()
    assert auto["speed"] == {"dropout": "fast", "attention": "eager", "embedding_allreduce": "dense"}
    assert "auto" in auto["speed_reason"]["dropout"]
    assert levers.choose("torch", "sdpa", "dense")["speed"] == {"dropout": "torch", "attention": "sdpa",
                                                                 "embedding_allreduce": "dense"}
