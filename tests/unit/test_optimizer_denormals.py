"""The one-pass AdamW kernel flushes denormal floats to zero while it runs
(master_adamw.c denormals_off): first moments that float arithmetic takes
through denormals stop near the smallest normal float or at 0, the masters
and weights are float arithmetic's bit for bit, and the threads
that ran the kernel (Python's and torch's OpenMP workers) keep denormals
in everything else they compute. torch's own AdamW step, every other
update, runs with the same flush on torch's threads (train/denormals.py):
the same weights bit for bit, and the threads as they were after it."""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

from helpers.one_rank import one_rank_group
from workflow.scripts.train import denormals, master_kernel
from workflow.scripts.train.comm import CommTimer
from workflow.scripts.train.loop import train_step
from workflow.scripts.train.state import TrainingState, denormal_flush

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


@contextlib.contextmanager
def torch_threads(threads: int):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def test_the_threads_that_ran_the_kernel_keep_denormals_elsewhere(kernel):
    for threads in (1, 2):
        with torch_threads(threads):
            grad, master, exp_avg, exp_avg_sq = idle_state(3 * master_kernel.CHUNK)  # calls on every thread
            kernel.run(kernel.adamw(master.bfloat16(), grad, master, exp_avg, exp_avg_sq,
                                    master_kernel.adamw_args(2e-5, 0.9, 0.999, 0.0, 1e-8, 700.0)))
            x = torch.full((3 * master_kernel.CHUNK,), 4 * TINY) / 8  # torch's ops on the same threads
            assert bool((x == 4 * TINY / 8).all()) and float(x[0]) > 0


FLUSH_BITS = 0x8040  # MXCSR flush-to-zero and denormals-are-zero


def torchs_adamw(master, exp_avg, exp_avg_sq) -> tuple[torch.nn.Parameter, torch.optim.AdamW]:
    """torch's fused AdamW (as make_optimizer builds it) over one fp32 parameter, from step 700 with these
    moments and a zero gradient."""
    param = torch.nn.Parameter(master.clone())
    optimizer = torch.optim.AdamW([param], lr=2e-5, weight_decay=0.0, fused=True)
    param.grad = torch.zeros_like(param)
    optimizer.state[param] = {"step": torch.tensor(700.0), "exp_avg": exp_avg.clone(),
                              "exp_avg_sq": exp_avg_sq.clone()}
    return param, optimizer


@pytest.mark.parametrize("threads", [1, 2])
def test_torchs_adamw_flushed_on_its_threads_gives_the_same_weights(kernel, threads):
    """300 zero-gradient steps of torch's fused AdamW, with and without the flush around each: the
    weights and second moments bit for bit; the plain run's first moments pass through denormals,
    the flushed run's leave none."""
    _, master, exp_avg, exp_avg_sq = idle_state(200_000)  # enough elements for torch to split over threads
    with torch_threads(threads):
        if not kernel.reaches_torchs_threads():  # a build without OpenMP on torch's runtime: no flush offered
            assert denormals.flushing(torch.optim.AdamW([torch.nn.Parameter(master)]))[0] is None
            return
        plain, plain_step = torchs_adamw(master, exp_avg, exp_avg_sq)
        flushed, flushed_step = torchs_adamw(master, exp_avg, exp_avg_sq)
        passed_denormals = 0
        for _ in range(300):
            plain_step.step()
            with kernel.denormals_flushed():
                flushed_step.step()
            assert torch.equal(plain, flushed)
            m = plain_step.state[plain]["exp_avg"]
            passed_denormals += int(((m != 0) & (m.abs() < TINY)).sum())
    assert passed_denormals > 1000
    state = flushed_step.state[flushed]
    assert torch.equal(state["exp_avg_sq"], plain_step.state[plain]["exp_avg_sq"])
    assert not ((state["exp_avg"] != 0) & (state["exp_avg"].abs() < TINY)).any()


def test_the_flush_reaches_every_one_of_torchs_threads_and_leaves_them_as_they_were(kernel):
    for threads in (1, 2):
        with torch_threads(threads):
            if not kernel.reaches_torchs_threads():  # a build without OpenMP on torch's runtime: no flush offered
                assert denormals.flushing(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))]))[0] is None
                continue
            before = kernel.control_bits()
            assert len(before) == threads
            with kernel.denormals_flushed():
                assert all(bits & FLUSH_BITS == FLUSH_BITS for bits in kernel.control_bits())
                x = torch.full((3 * master_kernel.CHUNK,), 4 * TINY) / 8  # torch splits it over its threads
                assert not x.any()
            assert [bits & FLUSH_BITS for bits in kernel.control_bits()] == [bits & FLUSH_BITS for bits in before]
            x = torch.full((3 * master_kernel.CHUNK,), 4 * TINY) / 8
            assert bool((x == 4 * TINY / 8).all()) and float(x[0]) > 0


def test_train_step_runs_torchs_adamw_flushed_and_the_forward_keeps_denormals(kernel):
    """A rank's update (loop.train_step) as state.build sets it up: torch's AdamW under the flush, the
    forward and backward outside it."""

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4))

        def forward(self, x):
            seen["forward"] = kernel.control_bits()
            return types.SimpleNamespace(loss=(self.w * x).sum())

    seen = {}
    with one_rank_group(), torch_threads(2 if kernel.reaches_torchs_threads() else 1):
        model = Model()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        flush, line = denormal_flush(optimizer)
        assert flush is not None and line.startswith("flushed to zero on torch's threads")
        optimizer.register_step_pre_hook(lambda *_: seen.update(step=kernel.control_bits()))
        comm = CommTimer()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ddp.register_comm_hook(comm, CommTimer.hook)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        t = TrainingState(ddp, model, optimizer, scheduler, None, None, contextlib.nullcontext, comm, 1, 0.0,
                          flush_denormals=flush)
        train_step(t, [{"x": torch.full((4,), 2.0)}])
        after = kernel.control_bits()
    assert all(bits & FLUSH_BITS == FLUSH_BITS for bits in seen["step"])
    assert not any(bits & FLUSH_BITS for bits in seen["forward"] + after)


def test_the_one_pass_update_flushes_itself_and_without_a_kernel_one_line_says_why(kernel, monkeypatch, tmp_path):
    one_pass = types.SimpleNamespace(one_pass=True)
    assert denormals.flushing(one_pass) == (None, "flushed by the one-pass kernel itself")
    adamw = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], fused=True)
    with torch_threads(2), monkeypatch.context() as patch:  # a build beside another OpenMP runtime
        patch.setattr(kernel, "openmp", False)
        flush, line = denormals.flushing(adamw)
        assert flush is None and line.startswith("not flushed: the kernel's build does not run on torch's OpenMP")
    monkeypatch.setenv("CC", str(tmp_path / "no-cc"))
    monkeypatch.setenv("CPUDDP_KERNEL_CACHE", str(tmp_path / "cache"))
    flush, line = denormals.flushing(adamw)
    assert flush is None and line.startswith("not flushed: no C compiler") and "\n" not in line
