"""The one-pass dropout of train.speed.dropout_mask `hash`
(train/dropout_kernel.c): the mask its definition gives, p and the mean
kept, the same mask forward and backward, the same result on any number of
threads, seeds from torch's generator, and a clear reason without a compiler."""

from __future__ import annotations

import pytest
import torch

from helpers.tiny_family import tiny_hf
from workflow.scripts.train import dropout_kernel, encoder, master_kernel
from workflow.scripts.train.dropout_kernel import KernelDropout


@pytest.fixture(autouse=True)
def kernel(hash_dropout_kernel):
    if hash_dropout_kernel[0] is None:
        pytest.skip(f"the dropout kernel did not build: {hash_dropout_kernel[1]}")
    return hash_dropout_kernel[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_mask_is_its_definition_and_kept_elements_are_scaled_as_torch_rounds(kernel, dtype):
    x = torch.randn(3, 1000, 77).to(dtype)  # not a multiple of any vector width
    seed, threshold = 0xDEADBEEF12345678, dropout_kernel.dropped(0.1)
    y = kernel.dropout(x, seed, threshold, 1.25)
    keep = dropout_kernel.keep_reference(x.numel(), seed, threshold).view(x.shape)
    assert torch.equal(y, torch.where(keep, x * 1.25, 0.0).to(dtype))


def test_p_and_the_mean_are_kept_and_neighbours_are_independent(kernel):
    torch.manual_seed(0)
    for p in (0.1, 0.5):
        out = KernelDropout.apply(torch.ones(1000, 1000), p, kernel)
        kept = out != 0
        assert abs(1 - kept.float().mean().item() - p) < 0.002  # 1e6 draws: the standard error is 0.0005
        assert abs(out.mean().item() - 1.0) < 0.005
        both = (kept[:, 1:] & kept[:, :-1]).float().mean().item()
        assert abs(both - (1 - p) ** 2) < 0.003  # adjacent elements: no correlation


def test_backward_drops_the_same_elements_with_the_same_scale(kernel):
    x = torch.randn(64, 384, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(64, 384, dtype=torch.bfloat16)
    y = KernelDropout.apply(x, 0.1, kernel)
    y.backward(grad)
    kept = y != 0
    scale = 1 / (1 - dropout_kernel.dropped(0.1) / 2 ** 16)
    assert torch.equal(x.grad, torch.where(kept, grad * scale, 0.0).bfloat16())


def test_the_same_result_on_one_thread_or_two_and_seeds_follow_torch(kernel):
    x = torch.randn(3 * master_kernel.CHUNK + 5)  # several chunks, run on two threads
    threads = torch.get_num_threads()
    try:
        results = []
        for count in (1, 2):
            torch.set_num_threads(count)
            torch.manual_seed(7)
            results.append(KernelDropout.apply(x, 0.1, kernel))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(*results)
    torch.manual_seed(8)
    assert not torch.equal(results[0], KernelDropout.apply(x, 0.1, kernel))


def test_the_lever_reaches_the_encoders_dropout_and_trains():
    model, _ = encoder.build(tiny_hf("Bert", "classification"), "classification", hash_dropout=True)
    assert model.encoder.kernel is not None and model.head.kernel is not None
    assert model.choices["dropout"].startswith("hash kernel")
    model.train()
    batch = {"input_ids": torch.randint(2, 100, (2, 9)), "labels": torch.tensor([0, 1])}
    loss = model(**batch).loss
    loss.backward()
    assert torch.isfinite(loss) and model.encoder.layers[0].query.weight.grad.abs().sum() > 0


def test_without_a_compiler_a_reason_and_torchs_dropout(monkeypatch, tmp_path):
    kernel, why = dropout_kernel.build(cc=str(tmp_path / "no-cc"), cache=tmp_path)
    assert kernel is None and why.startswith("no C compiler") and "\n" not in why
    monkeypatch.setenv("CC", str(tmp_path / "no-cc"))
    monkeypatch.setattr(dropout_kernel, "load", lambda: (None, why))
    model, _ = encoder.build(tiny_hf("Bert", "classification"), "classification", hash_dropout=True)
    assert model.encoder.kernel is None and model.choices["dropout"] == f"torch: {why}"
