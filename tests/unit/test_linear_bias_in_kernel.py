"""bucket_grads.forward_linear: oneDNN's linear with the bias in the kernel
where it gives F.linear's bits on this CPU, F.linear everywhere else."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.bits import bits
from workflow.scripts.train import bucket_grads


@pytest.fixture(autouse=True)
def fresh_shapes(monkeypatch):
    monkeypatch.setattr(bucket_grads, "_BIAS_IN_KERNEL", {})


@pytest.mark.parametrize("rows, inputs, outputs", [(864, 384, 384), (37, 384, 1536), (16, 1536, 384), (5, 32, 2)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gives_f_linears_bits_on_every_call(rows, inputs, outputs, dtype):
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, inputs, generator=g).to(dtype)
    weight = (torch.randn(outputs, inputs, generator=g) / inputs ** 0.5).to(dtype)
    bias = torch.randn(outputs, generator=g).to(dtype)
    for _ in range(3):  # the first call of a shape checks, the later ones use what it found
        assert torch.equal(bits(bucket_grads.forward_linear(x, weight, bias)), bits(F.linear(x, weight, bias)))
    key = (rows, inputs, outputs, torch.get_num_threads())
    assert (key in bucket_grads._BIAS_IN_KERNEL) == (dtype == torch.bfloat16)  # fp32 is never offered the op


def test_a_non_contiguous_input_gives_the_same_bits():
    x = torch.randn(64, 96).bfloat16()[::2, :48]
    weight, bias = torch.randn(24, 48).bfloat16(), torch.randn(24).bfloat16()
    for _ in range(2):
        assert torch.equal(bits(bucket_grads.forward_linear(x, weight, bias)), bits(F.linear(x, weight, bias)))


def test_a_fused_result_that_differs_is_never_used(monkeypatch):
    """Error path: a oneDNN that sums in another order (stood in for by a result one bf16 unit off)."""
    monkeypatch.setattr(bucket_grads, "_bias_in_kernel", lambda x, w, b: (F.linear(x, w, b).float() * 1.01).bfloat16())
    x, weight, bias = torch.randn(8, 16).bfloat16(), torch.randn(4, 16).bfloat16(), torch.randn(4).bfloat16()
    for _ in range(3):
        assert torch.equal(bits(bucket_grads.forward_linear(x, weight, bias)), bits(F.linear(x, weight, bias)))
    assert list(bucket_grads._BIAS_IN_KERNEL.values()) == [False]


def test_a_torch_without_the_op_falls_back(monkeypatch):
    """Error path: torch.ops.mkldnn without _linear_pointwise."""
    class NoOps:
        def __getattr__(self, name):
            raise AttributeError(name)

    monkeypatch.setattr(torch.ops, "mkldnn", NoOps())
    x, weight, bias = torch.randn(8, 16).bfloat16(), torch.randn(4, 16).bfloat16(), torch.randn(4).bfloat16()
    assert torch.equal(bits(bucket_grads.forward_linear(x, weight, bias)), bits(F.linear(x, weight, bias)))
    assert list(bucket_grads._BIAS_IN_KERNEL.values()) == [False]


def test_the_step_profile_counts_the_fused_linears_flops():
    """The profiler counts no FLOPs for oneDNN's linear: bench.step_profile counts them from its shapes,
    as many as the addmm it replaces."""
    from torch.profiler import ProfilerActivity, profile

    from bench.step_profile import op_flops

    x, weight, bias = torch.randn(96, 64).bfloat16(), torch.randn(48, 64).bfloat16(), torch.randn(48).bfloat16()
    if bucket_grads._bias_in_kernel(x, weight, bias) is None:
        pytest.skip("this torch has no oneDNN linear")
    with profile(activities=[ProfilerActivity.CPU], with_flops=True, record_shapes=True) as prof:
        for _ in range(3):
            bucket_grads._bias_in_kernel(x, weight, bias)
            torch.addmm(bias, x, weight.t())
    events = {e.key: e for e in prof.key_averages(group_by_input_shape=True)}
    assert op_flops(events["mkldnn::_linear_pointwise"]) == op_flops(events["aten::addmm"]) == 3 * 2 * 96 * 64 * 48
