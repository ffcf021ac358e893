"""The dropout, residual add and LayerNorm of cpuddp's encoder in one kernel
pass (train/add_norm.py, dropout_kernel.c add_norm_*): the unfused
dropout and sum bit for bit, the norm within a bf16 unit of torch's, the
gradients within bf16's rounding of a float64 reference (gamma's and
beta's far closer than torch's bf16 backward), the same bits on one
thread, two OpenMP threads or two Python threads, in bf16 and in fp32 (no
rounding: within fp32's sums of float64), and in the encoder on bf16 or
fp32 weights outside autocast."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.add_norm_calls import fused
from helpers.tiny_family import batch, run, tiny_hf
from workflow.scripts.train import add_norm, dropout_kernel, encoder, master
from workflow.scripts.train.dropout_kernel import KernelDropout
from workflow.scripts.train.encoder import layers

ROWS, WIDTH = 203, 384  # not a multiple of the calls' 16 rows


@pytest.fixture
def kernel(hash_dropout_kernel):
    if hash_dropout_kernel[0] is None:
        pytest.skip(f"the dropout kernel did not build: {hash_dropout_kernel[1]}")
    return hash_dropout_kernel[0]


def inputs(rows: int = ROWS, width: int = WIDTH, dtype: torch.dtype = torch.bfloat16):
    generator = torch.Generator().manual_seed(0)
    a, r, grad = (torch.randn(rows, width, generator=generator).to(dtype) for _ in range(3))
    weight = (1 + 0.1 * torch.randn(width, generator=generator)).to(dtype)
    bias = (0.1 * torch.randn(width, generator=generator)).to(dtype)
    return a, r, weight, bias, grad


def test_the_dropout_and_the_sum_are_the_unfused_ones_bit_for_bit_and_the_norm_within_a_bf16_unit(kernel):
    a, r, weight, bias, _ = inputs()
    seed, threshold, scale = 0x1234_5678_9ABC_DEF0, dropout_kernel.dropped(0.1), dropout_kernel.keep_scale(0.1)
    s, y, mean, rstd = add_norm.forward(kernel, a, r, weight, bias, 1e-12, seed, threshold, scale)
    unfused = kernel.dropout(a, seed, threshold, scale) + r
    assert torch.equal(s, unfused)
    want = F.layer_norm(unfused.float(), (WIDTH,), weight.float(), bias.float(), 1e-12)
    assert (y.float() - want).abs().max() <= 2 ** -7 * want.abs().max()  # at most a bf16 unit of the largest
    assert (y != want.bfloat16()).float().mean() < 0.01
    torch.testing.assert_close(mean, unfused.float().mean(1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rstd, unfused.float().var(1, unbiased=False).add(1e-12).rsqrt(), rtol=1e-5, atol=0)


def test_gradients_are_float64s_within_bf16_rounding_and_dropout_follows_the_same_mask(kernel):
    a, r, weight, bias, grad = inputs(rows=1728)
    y, da, dr, dweight, dbias = fused(kernel, a, r, weight, bias, grad, p=0.0)
    leaves = [t.double().requires_grad_() for t in (a, r, weight, bias)]
    F.layer_norm(leaves[0] + leaves[1], (WIDTH,), leaves[2], leaves[3], 1e-12).backward(grad.double())
    torch_leaves = [t.clone().requires_grad_() for t in (a, r, weight, bias)]
    F.layer_norm(torch_leaves[0] + torch_leaves[1], (WIDTH,), torch_leaves[2], torch_leaves[3], 1e-12).backward(grad)

    def error(got, want):
        return float((got.double() - want).norm() / want.norm())

    assert torch.equal(da, dr)  # p 0: the add passes the gradient on as it is
    assert error(dr, leaves[1].grad) < 3e-3  # a bf16 rounding of each element (2^-9 relative, on average)
    for ours, theirs, want in ((dweight, torch_leaves[2].grad, leaves[2].grad),
                               (dbias, torch_leaves[3].grad, leaves[3].grad)):
        assert error(ours, want) < 3e-3 < error(theirs, want) / 4  # torch's bf16 backward: about 5% off
    _, da, dr, _, _ = fused(kernel, a, r, weight, bias, grad, p=0.1)
    torch.manual_seed(3)
    seed = dropout_kernel.draw_seed()
    assert torch.equal(da, kernel.dropout(dr, seed, dropout_kernel.dropped(0.1), dropout_kernel.keep_scale(0.1)))
    assert 0.08 < float((da == 0).float().mean()) < 0.12


def test_fp32_is_the_unfused_dropout_and_sum_bit_for_bit_and_float64s_norm_within_fp32_sums(kernel):
    a, r, weight, bias, grad = inputs(dtype=torch.float32)
    seed, threshold, scale = 0x1234_5678_9ABC_DEF0, dropout_kernel.dropped(0.1), dropout_kernel.keep_scale(0.1)
    s, y, _, _ = add_norm.forward(kernel, a, r, weight, bias, 1e-12, seed, threshold, scale)
    assert s.dtype == y.dtype == torch.float32
    assert torch.equal(s, kernel.dropout(a, seed, threshold, scale) + r)
    torch.testing.assert_close(y, F.layer_norm(s, (WIDTH,), weight, bias, 1e-12), rtol=1e-5, atol=1e-5)
    y, da, dr, dweight, dbias = fused(kernel, a, r, weight, bias, grad, p=0.0)
    leaves = [t.double().requires_grad_() for t in (a, r, weight, bias)]
    want = F.layer_norm(leaves[0] + leaves[1], (WIDTH,), leaves[2], leaves[3], 1e-12)
    want.backward(grad.double())
    assert torch.equal(da, dr)
    for got, expected in ((y, want.detach()), *zip((da, dr, dweight, dbias), (t.grad for t in leaves))):
        assert got.dtype == torch.float32
        assert (got.double() - expected).norm() <= 1e-5 * expected.norm()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_same_bits_on_one_thread_two_openmp_threads_or_two_python_threads(kernel, monkeypatch, dtype):
    a, r, weight, bias, grad = inputs(dtype=dtype)
    threads = torch.get_num_threads()
    results = []
    try:
        for count, openmp in ((1, kernel.openmp), (2, kernel.openmp), (2, False)):
            torch.set_num_threads(count)
            monkeypatch.setattr(kernel, "openmp", openmp)
            results.append(fused(kernel, a, r, weight, bias, grad))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        assert all(torch.equal(x, y) for x, y in zip(results[0], other))


def test_the_encoder_takes_the_pass_on_bf16_or_fp32_weights_and_torchs_ops_in_autocast(kernel):
    model, _ = encoder.build(tiny_hf("Bert", "classification"), "classification", hash_dropout=True)
    data = batch([12, 7, 12, 3, 9, 7], 12, "classification")

    def ops(model) -> dict:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            torch.manual_seed(1)
            out = run(model, data, "classification")
        return out, {event.key: event.count for event in prof.key_averages()}

    model.train()
    sites = 1 + 2 * len(model.encoder.layers)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, autocast = ops(model)  # bf16 autocast (the exact path): torch's dropout, add and norm
    assert "KernelAddNorm" not in autocast and autocast["aten::native_layer_norm"] == sites
    got, fp32 = ops(model)
    assert fp32["KernelAddNorm"] == sites and "aten::native_layer_norm" not in fp32
    model.encoder.fused_norm = False
    want, _ = ops(model)
    torch.testing.assert_close(got[0]["loss"], want[0]["loss"], rtol=1e-5, atol=1e-6)
    for name, grad in want[1].items():
        assert (got[1][name] - grad).norm() <= 1e-4 * grad.norm() + 1e-6, name
    model.encoder.fused_norm = True
    master.to_bf16_encoder(model)
    got, calls = ops(model)
    assert calls["KernelAddNorm"] == sites and "aten::native_layer_norm" not in calls
    model.encoder.fused_norm = False
    want, unfused = ops(model)
    assert "KernelAddNorm" not in unfused
    torch.testing.assert_close(got[0]["loss"], want[0]["loss"], rtol=2e-2, atol=2e-2)
    for name, grad in want[1].items():
        assert (got[1][name].float() - grad.float()).norm() <= 0.05 * grad.float().norm() + 1e-3, name


def test_without_the_kernel_or_in_autocast_add_norm_is_torchs(kernel):
    a, r, weight, bias, _ = inputs(rows=8)
    norm = torch.nn.LayerNorm(WIDTH, eps=1e-12).bfloat16()
    with torch.no_grad():
        norm.weight.copy_(weight), norm.bias.copy_(bias)
    want = norm(a + r)
    assert torch.equal(layers.add_norm(a, r, norm, 0.1, False, None), want)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(layers.add_norm(a, r, norm, 0.1, False, kernel), norm(a + r))
    torch.manual_seed(0)
    dropped = KernelDropout.apply(a, 0.1, kernel)
    torch.manual_seed(0)
    assert torch.equal(layers.add_norm(a, r, norm, 0.1, True, kernel, fused=False), norm(dropped + r))


@pytest.mark.parametrize("openmp", [True, False])
def test_no_rows_give_empty_outputs_and_zero_gradients(kernel, monkeypatch, openmp):
    a, r, weight, bias, grad = (t[:0] if t.dim() == 2 else t for t in inputs())
    threads = torch.get_num_threads()
    monkeypatch.setattr(kernel, "openmp", openmp and kernel.openmp)
    try:
        torch.set_num_threads(2)
        y, da, dr, dweight, dbias = fused(kernel, a, r, weight, bias, grad)
    finally:
        torch.set_num_threads(threads)
    assert y.shape == da.shape == dr.shape == (0, WIDTH)
    assert not dweight.any() and not dbias.any()
