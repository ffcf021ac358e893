"""The one-pass dropout of train.speed.dropout_mask `hash`
(train/dropout_kernel.c): built with the system C compiler on first use
(train/kernel_build.py), loaded with ctypes, wrapped in autograd
functions whose backward recomputes the mask from the same seed: dropout
alone (KernelDropout), and the attention's scale, mask, softmax and
dropout in one pass (cpuddp's encoder, encoder/attention.py).

The seed of each call is drawn from torch's generator (one int64), so a
run's masks follow from torch.manual_seed and a checkpoint's RNG state,
as torch's dropout does: exact resume holds. Big tensors are cut into
chunks run on torch's thread count of Python threads (ctypes releases the
GIL); the mask depends on the element only, so the result is the same on
any number of threads.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from workflow.scripts.train import kernel_build
from workflow.scripts.train.kernel_build import CHUNK, run

SOURCE = Path(__file__).with_name("dropout_kernel.c")
BITS = 16  # p is exact to 1/2^16


class Kernel:
    def __init__(self, lib: ctypes.CDLL):
        pointer, count = ctypes.c_void_p, ctypes.c_int64
        self.functions = {torch.bfloat16: lib.dropout_bf16, torch.float32: lib.dropout_fp32}
        for function in self.functions.values():
            function.argtypes = [pointer, pointer, count, ctypes.c_uint64, count, ctypes.c_uint32, ctypes.c_float]
            function.restype = None
        real, seed, threshold = ctypes.c_float, ctypes.c_uint64, ctypes.c_uint32
        self.forward_rows = lib.softmax_dropout_bf16
        self.forward_rows.argtypes = [pointer, pointer] + [count] * 6 + [real, seed, threshold, real, pointer, pointer]
        self.backward_rows = lib.softmax_dropout_backward_bf16
        self.backward_rows.argtypes = [pointer, pointer] + [count] * 3 + [real, seed, threshold, real, pointer]
        for function in (self.forward_rows, self.backward_rows):
            function.restype = None

    def dropout(self, x: torch.Tensor, seed: int, dropped: int, scale: float) -> torch.Tensor:
        """x x scale where kept, else 0: a new contiguous tensor."""
        x = x.contiguous()
        y = torch.empty_like(x)
        function, size = self.functions[x.dtype], x.element_size()
        calls = [(function, (x.data_ptr() + start * size, y.data_ptr() + start * size, min(CHUNK,
                 x.numel() - start), seed, start, dropped, scale), min(CHUNK, x.numel() - start), (x, y))
                 for start in range(0, x.numel(), CHUNK)]
        run(calls)
        return y

    def softmax_dropout(self, scores: torch.Tensor, mask: torch.Tensor, scaling: float, seed: int, dropped: int,
                        keep_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(dropout(softmax(scores x scaling + mask)), softmax(...)) for bf16
        scores [batch, heads, queries, keys] and an fp32 mask [batch,
        1 or queries, keys]."""
        batch, heads, queries, keys = scores.shape
        scores = scores.contiguous()
        out, probs = torch.empty_like(scores), torch.empty_like(scores)
        calls = [(self.forward_rows, (scores.data_ptr() + first * keys * 2, mask.data_ptr(), first, rows, keys,
                                      heads, queries, mask.shape[1], scaling, seed, dropped, keep_scale,
                                      probs.data_ptr() + first * keys * 2, out.data_ptr() + first * keys * 2),
                  rows * keys, (scores, mask, out, probs)) for first, rows in _row_chunks(scores)]
        run(calls)
        return out, probs

    def softmax_dropout_backward(self, grad: torch.Tensor, probs: torch.Tensor, scaling: float, seed: int,
                                 dropped: int, keep_scale: float) -> torch.Tensor:
        """The gradient of the scores, from that of softmax_dropout's output."""
        grad = grad.contiguous().to(torch.bfloat16)
        keys = probs.shape[-1]
        out = torch.empty_like(probs)
        calls = [(self.backward_rows, (grad.data_ptr() + first * keys * 2, probs.data_ptr() + first * keys * 2,
                                       first, rows, keys, scaling, seed, dropped, keep_scale,
                                       out.data_ptr() + first * keys * 2), rows * keys, (grad, probs, out))
                 for first, rows in _row_chunks(probs)]
        run(calls)
        return out

    def agrees_with_its_definition(self) -> bool:
        """Whether the build keeps exactly the elements whose hash says so and
        scales them as torch rounds (a compiler that breaks either is refused)."""
        x = torch.arange(1, 4097, dtype=torch.float32)
        y = self.dropout(x, 0x123456789ABCDEF0, dropped(0.25), 2.0)
        kept = y != 0
        want = torch.where(keep_reference(4096, 0x123456789ABCDEF0, dropped(0.25)), x * 2.0, 0.0)
        half = self.dropout(x.bfloat16(), 0x123456789ABCDEF0, dropped(0.25), 1.1)
        return torch.equal(y, want) and torch.equal(half, torch.where(kept, x.bfloat16() * 1.1, 0.0).bfloat16())


def _row_chunks(scores: torch.Tensor) -> list[tuple[int, int]]:
    """(first row, rows) per call: whole rows, about CHUNK elements each."""
    rows, keys = scores.numel() // scores.shape[-1], scores.shape[-1]
    per_call = max(1, CHUNK // max(keys, 1))
    return [(first, min(per_call, rows - first)) for first in range(0, rows, per_call)]


def draw_seed() -> int:
    """A 64-bit seed from torch's default generator."""
    return int(torch.empty((), dtype=torch.int64).random_(-2 ** 63, 2 ** 63 - 1)) & (2 ** 64 - 1)


def dropped(p: float) -> int:
    """The 16-bit threshold: an element is dropped when its draw is below it."""
    return round(p * 2 ** BITS)


def keep_scale(p: float) -> float:
    """1 / (1 - p), for p rounded to 16 bits as the mask has it."""
    return 1.0 / (1.0 - dropped(p) / 2 ** BITS)


def keep_reference(n: int, seed: int, threshold: int) -> torch.Tensor:
    """The kernel's keep-mask for elements 0 .. n-1, in numpy-free torch int64
    arithmetic: the definition every build is checked against."""
    def mix(x):
        x = x ^ (x >> 16)
        x = (x * 0x7FEB352D) & 0xFFFFFFFF
        x = x ^ (x >> 15)
        x = (x * 0x846CA68B) & 0xFFFFFFFF
        return x ^ (x >> 16)
    index = torch.arange(n, dtype=torch.int64)
    h = mix((mix(index ^ (seed & 0xFFFFFFFF)) + (seed >> 32)) & 0xFFFFFFFF)
    return (h >> 16) >= threshold


def build(cc: str | None = None, cache: Path | None = None) -> tuple[Kernel | None, str]:
    return kernel_build.build_checked(SOURCE, Kernel, Kernel.agrees_with_its_definition,
                                      "drops other elements than its definition (a miscompiled build?)", cc, cache)


def load() -> tuple[Kernel | None, str]:
    return kernel_build.once(SOURCE, build)


class KernelDropout(torch.autograd.Function):
    """Dropout with the kernel, forward and backward (the same mask, from the seed)."""

    @staticmethod
    def forward(ctx, input, p: float, kernel: Kernel):
        ctx.args = (kernel, draw_seed(), dropped(p), keep_scale(p))
        return kernel.dropout(input, *ctx.args[1:])

    @staticmethod
    def backward(ctx, grad):
        kernel, *args = ctx.args
        return kernel.dropout(grad, *args), None, None
