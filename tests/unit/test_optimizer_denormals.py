"""The one-pass AdamW kernel flushes denormal floats to zero while it runs
(master_adamw.c denormals_off): first moments that float arithmetic takes
through denormals stop near the smallest normal float or at 0, the masters
and weights are float arithmetic's bit for bit, and the threads
that ran the kernel (Python's and torch's OpenMP workers) keep denormals
in everything else they compute."""

from __future__ import annotations

import pytest
import torch

from workflow.scripts.train import master_kernel

TINY = torch.finfo(torch.float32).tiny  # the smallest normal float, 1.18e-38


@pytest.fixture(autouse=True)
def kernel(one_pass_kernel):
    if one_pass_kernel[0] is None:
        pytest.skip(f"the one-pass kernel did not build: {one_pass_kernel[1]}")
    return one_pass_kernel[0]


def idle_state(n: int = 1000) -> tuple[torch.Tensor, ...]:
    """Rows no token uses any more: zero gradient, first moments from 1e-6 down to denormal, second
    moments small but normal."""
    generator = torch.Generator().manual_seed(0)
    master = torch.randn(n, generator=generator) * 0.05
    exp_avg = torch.randn(n, generator=generator) * torch.logspace(-6, -39, n)
    exp_avg_sq = torch.rand(n, generator=generator) * 1e-12 + 1e-14
    return torch.zeros(n, dtype=torch.bfloat16), master, exp_avg, exp_avg_sq


@pytest.mark.parametrize("bf16", [True, False])
def test_moments_decaying_into_denormals_leave_the_masters_float_arithmetics(kernel, bf16):
    """300 zero-gradient steps: float arithmetic takes many first moments through denormals (each
    operation an assist); flushed, a moment stops under 16 times the smallest normal float instead
    (once its decay's product, a tenth of it, flushes to 0) or at 0. Either way its share of the
    update is far below the master's rounding: masters, weights and second moments come out bit for
    bit, and the first moments that never came near the flush too."""
    grad, master, exp_avg, exp_avg_sq = idle_state()
    want, got = [master, exp_avg, exp_avg_sq], [t.clone() for t in (master, exp_avg, exp_avg_sq)]
    weight = master.bfloat16()
    passed_denormals = torch.zeros_like(master, dtype=torch.bool)
    came_near = torch.zeros_like(master, dtype=torch.bool)  # within reach of the flush: 0.1 m is denormal
    for step in range(1, 301):
        args = master_kernel.adamw_args(2e-5, 0.9, 0.999, 0.0, 1e-8, 700.0 + step)
        want = list(master_kernel.float_step(grad, *want, args))
        passed_denormals |= (want[1] != 0) & (want[1].abs() < TINY)
        came_near |= want[1].abs() < 16 * TINY
        if bf16:
            kernel.run(kernel.adamw(weight, grad, *got, args))
        else:
            kernel.run(kernel.adamw(None, grad.float(), *got, args))
        assert torch.equal(got[0], want[0]) and torch.equal(got[2], want[2])
    assert passed_denormals.sum() > 100
    if bf16:
        assert torch.equal(weight, want[0].bfloat16())
    assert torch.equal(got[1][~came_near], want[1][~came_near])
    assert bool((got[1][came_near].abs() < 16 * TINY).all())
    assert not ((got[1] != 0) & (got[1].abs() < TINY)).any()  # no denormal left to slow the next step


def test_the_threads_that_ran_the_kernel_keep_denormals_elsewhere(kernel):
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            grad, master, exp_avg, exp_avg_sq = idle_state(3 * master_kernel.CHUNK)  # calls on every thread
            kernel.run(kernel.adamw(master.bfloat16(), grad, master, exp_avg, exp_avg_sq,
                                    master_kernel.adamw_args(2e-5, 0.9, 0.999, 0.0, 1e-8, 700.0)))
            x = torch.full((3 * master_kernel.CHUNK,), 4 * TINY) / 8  # torch's ops on the same threads
            assert bool((x == 4 * TINY / 8).all()) and float(x[0]) > 0
    finally:
        torch.set_num_threads(before)
