"""train.speed.optimizer one_pass (train/master_kernel.py, master_adamw.c):
the compiled kernel against torch's fused AdamW over fp32 masters fed the
widened gradients. Masters and moments agree within 1e-6 of each tensor's
largest value, the bf16 weights are the masters rounded to nearest even,
the clip norm and the clipped update are torch's, checkpoints move between
the two paths, one thread and several give the same bits, and without a
compiler the loader says why and training keeps torch's path."""

from __future__ import annotations

import copy
import dataclasses
import types

import pytest
import torch
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

from helpers.adamw import gaps, give_gradients, parameters, reference, relative_difference, two_groups, widen_into
from helpers.tiny_encoders import tiny
from helpers.tiny_family import tiny_hf
from workflow.scripts.settings import levers
from workflow.scripts.settings.decisions import RunDecisions
from workflow.scripts.settings.views import TrainSettings
from workflow.scripts.train import encoder, master, master_kernel, speed
from workflow.scripts.train.master import MasterAdamW
from workflow.scripts.train.state import TrainingState, make_optimizer

SIZES = (0, 1, 7, 16, 33, 1000, 4099)  # empty, under one vector, not a multiple of 16
TOLERANCE = 1e-6


@pytest.fixture(autouse=True)
def kernel(one_pass_kernel):
    if one_pass_kernel[0] is None:
        pytest.skip(f"the one-pass kernel did not build: {one_pass_kernel[1]}")
    return one_pass_kernel[0]


def assert_weights_are_the_masters_rounded(optimizer: MasterAdamW) -> None:
    for p, m in optimizer.lowered:
        assert torch.equal(p.detach(), m.detach().to(torch.bfloat16))


def steps_against_torch(low, head, ours, theirs, steps: int, max_norm: float | None = None) -> dict[str, float]:
    """`steps` updates of both with the same gradients, the learning rate
    changed each step, a parameter without a gradient on step 1; the worst
    relative differences seen."""
    worst = {"master": 0.0, "exp_avg": 0.0, "exp_avg_sq": 0.0, "norm": 0.0, "norm_exact": 0.0}
    for step in range(steps):
        give_gradients(100 + step, low, head, scale=5.0 if max_norm else 1.0, skip=2 if step == 1 else None)
        widen_into(theirs, ours)
        for group, their_group in zip(ours.param_groups, theirs.param_groups):
            group["lr"] = their_group["lr"] = 1e-3 * (1 + step) / (1 + 2 * (step % 2))
        if max_norm is not None:
            their_grads = [m.grad for g in theirs.param_groups for m in g["params"] if m.grad is not None]
            their_norm = get_total_norm(their_grads)
            clip_grads_with_norm_([m for g in theirs.param_groups for m in g["params"]], max_norm, their_norm)
            exact = torch.cat([p.grad.double().flatten() for p in ours.model_params if p.grad is not None]).norm()
            norm = ours.clip_grad_norm(max_norm)
            worst["norm"] = max(worst["norm"], relative_difference(norm, their_norm))
            worst["norm_exact"] = max(worst["norm_exact"], relative_difference(norm, exact))
        ours.step()
        theirs.step()
        ours.zero_grad()
        assert_weights_are_the_masters_rounded(ours)
        worst.update({k: max(worst[k], v) for k, v in gaps(ours, theirs).items()})
    return worst


@pytest.mark.parametrize("beta1", [0.9, 0.3])  # both forms of torch's lerp
def test_the_kernel_is_its_float_arithmetic_bit_for_bit(kernel, beta1):
    """Every build computes the same bits, as DDP's replicas must: those of
    master_kernel.float_step, float32 ops one at a time."""
    args = master_kernel.adamw_args(3e-3, beta1, 0.99, 0.1, 1e-8, 7.0, 0.5)
    for n in (*SIZES, master_kernel.CHUNK + 5):
        torch.manual_seed(n)
        grad, weights, exp_avg, exp_avg_sq = torch.randn(n), torch.randn(n), torch.randn(n), torch.rand(n)
        for low in (grad.bfloat16(), None):  # a bf16 weight with its master; an fp32 parameter
            want = master_kernel.float_step(grad if low is None else low, weights, exp_avg, exp_avg_sq, args)
            got = [t.clone() for t in (weights.bfloat16(), weights, exp_avg, exp_avg_sq)]
            kernel.run(kernel.adamw(None if low is None else got[0], grad if low is None else low, *got[1:],
                                    args))
            assert all(torch.equal(a, b) for a, b in zip(got[1:], want, strict=True)), n
            assert torch.equal(got[0], (weights if low is None else want[0]).bfloat16()), n


def test_one_pass_is_torchs_fused_adamw_on_the_widened_gradients():
    low, head = parameters(0, SIZES)
    ours = MasterAdamW(two_groups(low, head), one_pass=True, lr=1e-3, fused=True)
    theirs = reference(ours)
    worst = steps_against_torch(low, head, ours, theirs, steps=5)
    print(f"one_pass against torch's fused AdamW, largest relative difference: {worst}")
    assert max(worst.values()) <= TOLERANCE, worst
    assert all(m.grad is None for _, m in ours.lowered)  # no widened gradients kept
    assert ours.state[ours.masters[SIZES.index(7)]]["step"].dtype == torch.float32


@pytest.mark.parametrize("max_norm", [0.5, 1e6])  # clipped, and a norm within max_norm (factor 1)
def test_clip_norm_and_the_clipped_update_are_torchs(max_norm):
    low, head = parameters(1, SIZES)
    ours = MasterAdamW(two_groups(low, head), one_pass=True, lr=1e-3, fused=True)
    theirs = reference(ours)
    worst = steps_against_torch(low, head, ours, theirs, steps=4, max_norm=max_norm)
    print(f"one_pass clipped at {max_norm} against torch, largest relative difference: {worst}")
    assert worst["norm_exact"] <= 1e-7, worst  # summed in double: the exact norm rounded to float
    # torch's norm is summed in float (3-4e-7 off the exact one here), so the
    # clip factors differ by that much, and the squared gradients by twice it.
    assert max(worst["master"], worst["exp_avg"], worst["norm"]) <= TOLERANCE and worst["exp_avg_sq"] <= 2 * TOLERANCE
    assert ours.clip_scale == 1.0  # used by the step it was for


def test_clipping_goes_through_the_one_pass_optimizer():
    low, head = parameters(2, SIZES)
    ours = MasterAdamW(two_groups(low, head), one_pass=True, lr=1e-3, fused=True)
    give_gradients(3, low, head, scale=5.0)
    t = TrainingState(None, None, ours, None, None, None, None, None, 1, max_grad_norm=0.5)
    norm = t.clip_gradients()
    widened = [p.grad.float() for p in ours.model_params if p.grad is not None]
    assert relative_difference(norm, get_total_norm(widened)) <= TOLERANCE
    assert ours.clip_scale == float(torch.clamp(0.5 / (norm + 1e-6), max=1.0)) < 1.0
    assert all(m.grad is None for _, m in ours.lowered)  # nothing widened


@pytest.mark.parametrize("first", [True, False])
def test_a_checkpoint_moves_between_one_pass_and_torchs_path(first):
    """Saved by one path and loaded into the other, the update continues
    as the saving path would have continued it (within rounding)."""
    low, head = parameters(4, SIZES)
    saver = MasterAdamW(two_groups(low, head), one_pass=first, lr=1e-3, weight_decay=0.01, fused=True)
    for step in range(3):
        give_gradients(10 + step, low, head)
        saver.step()
    saved = copy.deepcopy(saver.state_dict())  # as a checkpoint holds it: not the saver's live tensors
    again_low, again_head = parameters(4, SIZES)
    again_head.data.copy_(head.data)  # the model's state: an fp32 parameter is its own master
    loader = MasterAdamW(two_groups(again_low, again_head), one_pass=not first, lr=1e-3, weight_decay=0.01,
                         fused=True)
    loader.load_state_dict(saved)
    assert loader.state_dict()["param_groups"] == saved["param_groups"]
    assert all(torch.equal(a, b) for a, b in zip(loader.state_dict()["masters"], saved["masters"]))
    assert all(torch.equal(p, q) for p, q in zip(again_low, low))
    worst = 0.0
    for step in range(3):
        for params, opt in (((low, head), saver), ((again_low, again_head), loader)):
            give_gradients(20 + step, *params)
            opt.step()
        worst = max(worst, *(relative_difference(a.detach(), b.detach())
                             for a, b in zip(loader.masters, saver.masters)))
        theirs, ours = saver.state_dict()["state"], loader.state_dict()["state"]
        assert theirs.keys() == ours.keys() and all(ours[i]["step"] == theirs[i]["step"] for i in ours)
        assert all(set(ours[i]) == {"step", "exp_avg", "exp_avg_sq"} for i in ours)
        assert_weights_are_the_masters_rounded(loader)
    print(f"resumed on the other path, largest relative difference of the masters: {worst}")
    assert worst <= TOLERANCE


def test_threads_give_the_same_bits_as_one():
    sizes = (2 * master_kernel.CHUNK + 12345, 17, 0, master_kernel.CHUNK)
    results, before = [], torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            low, head = parameters(5, sizes)
            ours = MasterAdamW(two_groups(low, head), one_pass=True, lr=1e-3, fused=True)
            norms = []
            for step in range(2):
                give_gradients(30 + step, low, head, scale=5.0)
                norms.append(ours.clip_grad_norm(1.0))
                ours.step()
            results.append((norms, [p.detach().clone() for p in low],
                            [ours.state[m][k].clone() for m in ours.masters for k in ("exp_avg", "exp_avg_sq")],
                            [m.detach().clone() for m in ours.masters]))
    finally:
        torch.set_num_threads(before)
    one, two = results
    for a, b in zip(one, two):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def bf16_master_decisions(optimizer: str) -> RunDecisions:
    return RunDecisions("gloo", "bf16_master", 1, 1, 1,
                        levers=dataclasses.replace(levers.all_off(), optimizer=optimizer))


def test_the_lever_puts_one_pass_in_under_bf16_master_only():
    model, _ = encoder.build(tiny_hf("Bert", "classification"), "classification")  # not exact: the encoder's only
    master.to_bf16_encoder(model)
    decisions = bf16_master_decisions("one_pass")
    parts, status = speed.apply(model, decisions.levers, speed.Parts(precision="bf16_master"))
    assert status["optimizer"] == "on (one_pass)" and parts.one_pass_optimizer
    lines = []
    log = types.SimpleNamespace(info=lines.append)
    optimizer, _ = make_optimizer(model, TrainSettings(), 10, decisions, parts, log)
    assert isinstance(optimizer, MasterAdamW) and optimizer.one_pass
    assert lines and lines[0].startswith("optimizer one_pass: on")
    fp32_model, _ = encoder.build(tiny_hf("Bert", "classification"), "classification")
    _, status = speed.apply(fp32_model, decisions.levers, speed.Parts(precision="fp32"))
    assert status["optimizer"].startswith("off: train.precision fp32 has no fp32 masters")
    _, status = speed.apply(tiny("Bert", "eager"), decisions.levers, speed.Parts(precision="bf16_master"))
    assert status["optimizer"] == f"off: {speed.INEXACT}"  # transformers' models: exact levers only
    optimizer, _ = make_optimizer(model, TrainSettings(), 10, bf16_master_decisions("torch"), parts)
    assert not optimizer.one_pass  # the lever off: today's three passes


def test_without_a_compiler_a_reason_and_the_three_pass_path(monkeypatch, tmp_path):
    kernel, why = master_kernel.build(cc=str(tmp_path / "no-cc"), cache=tmp_path)
    assert kernel is None and why.startswith("no C compiler") and "\n" not in why
    monkeypatch.setenv("CC", str(tmp_path / "no-cc"))
    model, _ = encoder.build(tiny_hf("Bert", "classification"), "classification")
    master.to_bf16_encoder(model)
    decisions = bf16_master_decisions("one_pass")
    parts, status = speed.apply(model, decisions.levers, speed.Parts(precision="bf16_master"))
    assert status["optimizer"] == f"off: {why}" and not parts.one_pass_optimizer
    lines = []
    log = types.SimpleNamespace(info=lines.append)
    optimizer, _ = make_optimizer(model, TrainSettings(), 10, decisions, parts, log)
    assert isinstance(optimizer, MasterAdamW) and not optimizer.one_pass
    assert lines[0].startswith("optimizer one_pass: off: the kernel did not load here")
    with pytest.raises(RuntimeError, match="no C compiler"):
        MasterAdamW([{"params": list(model.parameters())}], one_pass=True, fused=True)


def test_a_steps_calls_run_on_torchs_openmp_threads_with_the_same_bits(monkeypatch):
    """Built with OpenMP, the library runs on the one runtime torch loaded (the loader reuses its
    libgomp.so.1: no second runtime is mapped), and a step's calls on its threads (run_calls) give
    what one thread, or Python threads, give, bit for bit: updates, row marks and sums of squares."""
    from workflow.scripts.train import kernel_build

    kernel, why = master_kernel.load()
    if kernel is None or not kernel_build.links_openmp(kernel.lib):
        pytest.skip(f"the kernel did not build with OpenMP: {why}")
    assert len(kernel_build.openmp_runtimes()) == 1 and kernel.openmp
    args = master_kernel.adamw_args(3e-3, 0.9, 0.99, 0.0, 1e-8, 7.0, 0.5)
    torch.manual_seed(0)
    sizes = (master_kernel.CHUNK + 5, 3001, 16)
    start = [[torch.randn(n).bfloat16(), torch.randn(n).bfloat16(), torch.randn(n), torch.randn(n), torch.rand(n)]
             for n in sizes]
    table = torch.zeros(3000, 48).bfloat16()
    table[::7] = torch.randn(429, 48).bfloat16()
    results, threads = [], torch.get_num_threads()
    try:
        for count, openmp in ((1, True), (2, True), (2, False)):
            torch.set_num_threads(count)
            monkeypatch.setattr(kernel, "openmp", openmp)
            state = [[t.clone() for t in tensors] for tensors in start]
            kernel.run([call for weight, grad, *rest in state for call in kernel.adamw(weight, grad, *rest, args)])
            active = torch.zeros(3000, dtype=torch.uint8)
            kernel.run(kernel.mark_rows(table, active))
            squares = kernel.sum_squares_bf16([grad for _, grad, *_ in state] + [table])
            results.append((state, active, squares))
    finally:
        torch.set_num_threads(threads)
    (first, first_active, first_squares), *others = results
    assert first_active.sum() == 429 and first_squares > 0
    for state, active, squares in others:
        assert squares == first_squares and torch.equal(active, first_active)
        assert all(torch.equal(a, b) for one, two in zip(state, first) for a, b in zip(one, two))
