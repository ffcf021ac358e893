"""The one matmul timer: the node check measures whether bf16 is faster than
fp32 with it (CPU flags alone can lie under a hypervisor), and the bench
measures the peak of a transformer layer's shape with it."""

from __future__ import annotations

import time


def matmul_gflops(dtype, size: int = 512, seconds: float = 0.3, *, shape: tuple[int, int, int] | None = None,
                  best_of: int = 1) -> float:
    """GFLOP/s of an (m x k) @ (k x n) matmul in `dtype` (m = k = n = `size`
    unless `shape` gives them): the best of `best_of` timings of `seconds`
    each, after one untimed product that pays the first call's set-up."""
    import torch

    m, k, n = shape or (size, size, size)
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    return product_gflops(lambda: a @ b, 2 * m * k * n, seconds, best_of)


def product_gflops(product, flops: int, seconds: float = 0.3, best_of: int = 1) -> float:
    """GFLOP/s of `product()`, a product of `flops` floating-point operations:
    the best of `best_of` timings of `seconds` each, each after one untimed call."""
    best = 0.0
    for _ in range(best_of):
        product()
        start, count = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            product()
            count += 1
        best = max(best, flops * count / (time.perf_counter() - start) / 1e9)
    return best
