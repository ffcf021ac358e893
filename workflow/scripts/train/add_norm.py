"""The dropout, residual add and LayerNorm of cpuddp's encoder in one pass,
forward and backward (dropout_kernel.c add_norm_*, built with the hash
dropout kernel; encoder/layers.py add_norm puts it in place).

torch runs a post-norm sublayer's tail as a dropout, an add and a layer
norm, each a pass over memory, a dispatch and (with threads) an OpenMP
fork/join, and autograd adds a sum backward. Here s = dropout(a) + r comes
out bit for bit as those ops give it (the same seed draw, the hash of the
element's index, the same bf16 roundings; in fp32 no rounding); the norm's
moments are summed in float lanes, so its output may differ from torch's by
a bf16 unit (fp32: by its sums' rounding); and
gamma's and beta's gradients are summed in float over fixed calls of
NORM_ROWS rows, where torch's bf16 backward lands about 5% off a float64
reference (bench/results/2026-12-07-epyc-zen4-add-norm-pass.txt). The
calls run on torch's OpenMP threads where the build shares its runtime,
else on Python threads, with the same bits.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from workflow.scripts.train.dropout_kernel import TYPES, Kernel, draw_seed, dropped, keep_scale
from workflow.scripts.train.kernel_build import CHUNK, run

NORM_ROWS = 16  # rows of a call: its unit of work and of gamma's and beta's partial sums


class EntryPoints:
    """The library's add-norm functions for one dtype, with their C signatures."""

    def __init__(self, lib: ctypes.CDLL, dtype: torch.dtype):
        pointer, count, real = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
        rows = [count] * 4 + [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint32, real]
        name = TYPES[dtype]
        self.forward = getattr(lib, f"add_norm_forward_{name}_calls")
        self.backward = getattr(lib, f"add_norm_backward_{name}_calls")
        self.forward.argtypes = [pointer] * 4 + rows + [real] + [pointer] * 4
        self.backward.argtypes = [pointer] * 5 + rows + [pointer] * 3
        self.forward.restype = self.backward.restype = ctypes.c_int  # 1: no memory for a row's scratch
        self.partials = getattr(lib, f"add_norm_partials_{name}")
        self.partials.argtypes = [pointer, count, count, pointer, pointer]
        self.partials.restype = None


@functools.cache
def entry_points(lib: ctypes.CDLL, dtype: torch.dtype) -> EntryPoints:
    return EntryPoints(lib, dtype)


def row_pieces(kernel: Kernel, rows: int) -> tuple[int, list[tuple[int, int]]]:
    """(OpenMP threads, pieces): the rows in one call on torch's OpenMP threads (one thread alone too), else
    (first row, rows) pieces of whole NORM_ROWS calls, one per Python thread (ctypes releases the GIL)."""
    threads = torch.get_num_threads()
    if kernel.openmp or threads == 1:
        return threads, [(0, rows)]
    step = max(1, -(-rows // threads // NORM_ROWS)) * NORM_ROWS
    return 1, [(first, min(step, rows - first)) for first in range(0, rows, step)]


def forward(kernel: Kernel, a, r, weight, bias, eps: float, seed: int, threshold: int, scale: float):
    """(s, y, mean, rstd): s = dropout(a) + r and y its LayerNorm with `weight` and `bias`, for a and r
    [rows, width] and the weights all bf16 or all fp32; mean and rstd float per row, kept with s for backward."""
    a, r = a.contiguous(), r.contiguous()
    rows, width = a.shape
    s, y = torch.empty_like(a), torch.empty_like(a)
    mean, rstd = a.new_empty(rows, dtype=torch.float32), a.new_empty(rows, dtype=torch.float32)
    threads, pieces = row_pieces(kernel, rows)
    function = entry_points(kernel.lib, a.dtype).forward
    enough_memory(run([(function, (a.data_ptr(), r.data_ptr(), weight.data_ptr(), bias.data_ptr(), width, first,
                                   count, NORM_ROWS, threads, seed, threshold, scale, eps, s.data_ptr(), y.data_ptr(),
                                   mean.data_ptr(), rstd.data_ptr()), CHUNK, (a, r, s, y, mean, rstd))
                       for first, count in pieces]))
    return s, y, mean, rstd


def backward(kernel: Kernel, grad, s, weight, mean, rstd, seed: int, threshold: int, scale: float):
    """(da, dr, dweight, dbias) from the gradient of forward's y."""
    grad = grad.contiguous().to(s.dtype)
    rows, width = s.shape
    calls = -(-rows // NORM_ROWS)
    da, dr = torch.empty_like(s), torch.empty_like(s)
    partials = s.new_empty(calls, 2, width, dtype=torch.float32)
    dweight, dbias = torch.empty_like(weight), torch.empty_like(weight)
    threads, pieces = row_pieces(kernel, rows)
    functions = entry_points(kernel.lib, s.dtype)
    enough_memory(run([(functions.backward, (grad.data_ptr(), s.data_ptr(), weight.data_ptr(), mean.data_ptr(),
                                             rstd.data_ptr(), width, first, count, NORM_ROWS, threads, seed,
                                             threshold, scale, da.data_ptr(), dr.data_ptr(), partials.data_ptr()),
                        CHUNK, (grad, s, mean, rstd, da, dr, partials)) for first, count in pieces]))
    functions.partials(partials.data_ptr(), calls, width, dweight.data_ptr(), dbias.data_ptr())
    return da, dr, dweight, dbias


def enough_memory(results: list) -> None:
    if any(results):
        raise MemoryError("the add-norm kernel found no memory for a row's scratch; free memory on this node or "
                          "lower train.batch_size")


class KernelAddNorm(torch.autograd.Function):
    """LayerNorm(dropout(a) + r) in one pass, forward and backward; p 0: no dropout (and no seed drawn)."""

    @staticmethod
    def forward(ctx, a, r, weight, bias, p: float, eps: float, kernel: Kernel):
        args = (draw_seed(), dropped(p), keep_scale(p)) if p > 0 else (0, 0, 1.0)
        s, y, mean, rstd = forward(kernel, a, r, weight, bias, eps, *args)
        ctx.save_for_backward(s, weight, mean, rstd)
        ctx.args = (kernel, *args)
        return y

    @staticmethod
    def backward(ctx, grad):
        s, weight, mean, rstd = ctx.saved_tensors
        da, dr, dweight, dbias = backward(ctx.args[0], grad, s, weight, mean, rstd, *ctx.args[1:])
        return da, dr, dweight, dbias, None, None, None
