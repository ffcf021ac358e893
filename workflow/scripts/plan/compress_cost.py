"""What gradient compression costs on this CPU, per gradient byte, and how
many bytes PowerSGD sends: the work DDP's fp16 / bf16 hooks and rank-1
PowerSGD add to each bucket's all-reduce (train/comm.py), for the plan.

fp16 / bf16: the bucket is cast down and divided before the all-reduce and
cast back after it. PowerSGD (rank r): each gradient matrix M (n x m) sends
P = M Q (n x r) and Q = M^T P (m x r) instead of M, with P orthogonalized and
the error M - P Q^T kept for the next step; vectors go uncompressed.
"""

from __future__ import annotations

import time

import torch

RANK = 1


def _seconds(work, repeats: int = 3) -> float:
    work()
    start = time.perf_counter()
    for _ in range(repeats):
        work()
    return (time.perf_counter() - start) / repeats


def cast_seconds(flat: torch.Tensor, dtype) -> float:
    def work():
        low = flat.to(dtype).div_(2)
        flat.copy_(low)
    return _seconds(work)


def matrices(model) -> list[tuple[int, int]]:
    """(n, m) of every gradient PowerSGD compresses (as its hook decides)."""
    shapes = []
    for param in model.parameters():
        if param.requires_grad and param.dim() > 1:
            n, m = param.shape[0], param.numel() // param.shape[0]
            if (n + m) * RANK < n * m:
                shapes.append((n, m))
    return shapes


def powersgd_seconds(shapes: list[tuple[int, int]]) -> float:
    tensors = [(torch.randn(n, m), torch.randn(m, RANK)) for n, m in shapes]

    def work():
        for grad, q in tensors:
            p = grad @ q
            p /= p.norm() + 1e-8  # rank 1: orthogonalizing is normalizing
            q2 = grad.t() @ p
            grad.sub_(p @ q2.t())  # error feedback: what was not sent
    return _seconds(work, repeats=1)


def measure(model) -> dict:
    """{compress_seconds_per_byte: {fp16, bf16, powersgd}, powersgd_ratio}."""
    total = sum(p.numel() for p in model.parameters() if p.requires_grad) * 4  # train.lora: the adapters only
    flat = torch.randn(total // 4)
    shapes = matrices(model)
    compressed = sum(n * m for n, m in shapes) * 4
    sent = total - compressed + sum((n + m) * RANK for n, m in shapes) * 4
    per_byte = {"fp16": cast_seconds(flat, torch.float16) / total, "bf16": cast_seconds(flat, torch.bfloat16) / total,
                "powersgd": powersgd_seconds(shapes) / total}
    return {"compress_seconds_per_byte": {k: float(f"{v:.4g}") for k, v in per_byte.items()},
            "powersgd_ratio": round(sent / total, 6)}
