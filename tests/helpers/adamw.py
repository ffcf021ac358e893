"""bf16_master's optimizer against torch's fused AdamW: parameters with
gradients, the reference AdamW over fp32 copies of the masters fed the
widened gradients, and how far two tensors are apart."""

from __future__ import annotations

import torch


def relative_difference(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """The largest difference over the tensor's largest magnitude (0 for an
    empty or all-zero tensor that is matched)."""
    if ours.numel() == 0:
        return 0.0
    scale = float(theirs.abs().max())
    gap = float((ours.double() - theirs.double()).abs().max())
    return gap / scale if scale else gap


def parameters(seed: int, sizes: tuple[int, ...]) -> tuple[list[torch.nn.Parameter], torch.nn.Parameter]:
    """bf16 parameters of `sizes` and an fp32 one (a head, its own master)."""
    torch.manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(n).bfloat16()) for n in sizes], torch.nn.Parameter(torch.randn(5, 3))


def two_groups(low: list, head) -> list[dict]:
    """A decayed group (with the head) and an undecayed one whose beta1 is
    below 0.5 (torch's other form of the lerp)."""
    return [{"params": low[::2] + [head], "weight_decay": 0.01},
            {"params": low[1::2], "weight_decay": 0.0, "betas": (0.3, 0.99)}]


def reference(optimizer: torch.optim.Optimizer) -> torch.optim.AdamW:
    """torch's fused AdamW over fp32 copies of `optimizer`'s masters, group for group."""
    groups = [{**{k: v for k, v in group.items() if k != "params"},
               "params": [torch.nn.Parameter(m.detach().clone()) for m in group["params"]]}
              for group in optimizer.param_groups]
    return torch.optim.AdamW(groups, fused=True)


def give_gradients(seed: int, low: list, head, scale: float = 1.0, skip: int | None = None) -> None:
    """New random gradients, bf16 for `low` (none for low[skip]), fp32 for the head."""
    torch.manual_seed(seed)
    for i, p in enumerate(low):
        p.grad = None if i == skip else (torch.randn(p.shape) * scale).bfloat16()
    head.grad = torch.randn(head.shape) * scale


def widen_into(theirs: torch.optim.Optimizer, ours) -> None:
    """The reference's gradients: ours widened to fp32, in the same order."""
    flat = [m for group in theirs.param_groups for m in group["params"]]
    for m, p in zip(flat, ours.model_params, strict=True):
        m.grad = None if p.grad is None else p.grad.to(torch.float32, copy=True)


def gaps(ours, theirs: torch.optim.Optimizer) -> dict[str, float]:
    """The largest relative difference of the masters and of each moment."""
    flat = [m for group in theirs.param_groups for m in group["params"]]
    found = {"master": 0.0, "exp_avg": 0.0, "exp_avg_sq": 0.0}
    for m, r in zip(ours.masters, flat, strict=True):
        found["master"] = max(found["master"], relative_difference(m.detach(), r.detach()))
        for key in ("exp_avg", "exp_avg_sq"):
            if r in theirs.state:
                found[key] = max(found[key], relative_difference(ours.state[m][key], theirs.state[r][key]))
    return found
