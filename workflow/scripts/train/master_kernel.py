"""The one-pass AdamW kernel of train.speed.optimizer `one_pass`
(train/master_adamw.c): compiled with the system C compiler on its first
use on a machine, cached, loaded with ctypes.

`load()` gives (kernel, where) or (None, a one-line reason: no compiler,
a failed build, a build whose bits are not float_step's); training then
keeps the three-pass path. Every build must compute the same bits (each
DDP rank updates its own replica), so each is checked against float_step
when it loads.
The build and its cache: train/kernel_build.py.

A step's calls (a call per chunk of CHUNK elements of a parameter) run on
torch's OpenMP threads with more than one torch thread (run_calls, where
the build shares torch's runtime: kernel_build.py), else on as many Python
threads (ctypes releases the GIL). The chunks are the same whatever the
thread count, so every result is the same bits on one thread or several.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from pathlib import Path

import numpy
import torch

from workflow.scripts.train import kernel_build
from workflow.scripts.train.kernel_build import CHUNK, run

SOURCE = Path(__file__).with_name("master_adamw.c")
ARGS = ("decay", "exp_avg_weight", "beta2", "exp_avg_sq_weight", "eps", "step_size", "bias_correction2_sqrt",
        "grad_scale")


class AdamwArgs(ctypes.Structure):
    """struct adamw_args of master_adamw.c, passed by value."""
    _fields_ = [(name, ctypes.c_float) for name in ARGS]


def adamw_args(lr: float, beta1: float, beta2: float, weight_decay: float, eps: float, step: float,
               grad_scale: float = 1.0) -> AdamwArgs:
    """The step's scalars as torch's fused CPU AdamW computes them: in
    double from the state's step (after its increment), then each rounded
    to float."""
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    return AdamwArgs(1 - lr * weight_decay, 1 - beta1, beta2, 1 - beta2, eps, lr / bias_correction1,
                     math.sqrt(bias_correction2), grad_scale)


def build(cc: str | None = None, cache: Path | None = None) -> tuple[Kernel | None, str]:
    """Compile (unless cached) and load the kernel with compiler `cc`
    ($CC, else cc): (kernel, where it is) or (None, why not)."""
    return kernel_build.build_checked(SOURCE, Kernel, Kernel.computes_the_float_step, "computes other bits than the "
                                      "float arithmetic it implements (a fast-math compiler?)", cc, cache)


def load() -> tuple[Kernel | None, str]:
    """build() once per process for this $CC and cache folder."""
    return kernel_build.once(SOURCE, build)


def _check(tensor: torch.Tensor, dtype: torch.dtype, name: str) -> None:
    assert tensor.dtype == dtype, f"{name}: {tensor.dtype}, not {dtype}"
    assert tensor.is_contiguous() and tensor.device.type == "cpu", f"{name}: not a contiguous CPU tensor"


class Call(ctypes.Structure):
    """struct call of master_adamw.c: one call of run_calls."""
    _fields_ = [("kind", ctypes.c_int64), ("p", ctypes.c_void_p * 5), ("n", ctypes.c_int64),
                ("width", ctypes.c_int64), ("active", ctypes.c_void_p), ("a", AdamwArgs), ("first", ctypes.c_int64)]


# Each function's kind in run_calls, and where its arguments go in a Call.
KINDS = {"adamw_bf16": (0, ("p", "p", "p", "p", "p", "n", "a")), "adamw_fp32": (1, ("p", "p", "p", "p", "n", "a")),
         "adamw_bf16_rows": (2, ("p", "p", "p", "p", "p", "n", "width", "active", "a")),
         "mark_rows_bf16": (3, ("p", "n", "width", "active")), "sum_squares_bf16": (4, ("p", "n")),
         "sum_squares_flagged_bf16": (5, ("p", "n", "first", "width", "active"))}
SUMS = ("sum_squares_bf16", "sum_squares_flagged_bf16")  # the kinds whose result run() returns


def as_call(function, args: tuple) -> Call:
    kind, fields = KINDS[function.__name__]
    call, pointers = Call(kind=kind), 0
    for field, value in zip(fields, args):
        if field == "p":
            call.p[pointers], pointers = value, pointers + 1
        else:
            setattr(call, field, value)
    return call


class Kernel:
    """The loaded library: its calls are gathered into lists (a call per
    chunk, holding its tensors) and run together by run()."""

    def __init__(self, lib: ctypes.CDLL):
        pointer, count = ctypes.c_void_p, ctypes.c_int64
        self.lib = lib
        lib.run_calls.argtypes = [pointer, count, ctypes.c_int, pointer]
        lib.run_calls.restype = None
        self.openmp = kernel_build.shares_torchs_openmp(lib)
        """Calls on torch's OpenMP threads (run_calls), else on Python threads (kernel_build.run)."""
        lib.adamw_bf16.argtypes = [pointer] * 5 + [count, AdamwArgs]
        lib.adamw_bf16.restype = None
        lib.adamw_fp32.argtypes = [pointer] * 4 + [count, AdamwArgs]
        lib.adamw_fp32.restype = None
        lib.sum_squares_bf16.argtypes = [pointer, count]
        lib.sum_squares_bf16.restype = ctypes.c_double
        lib.adamw_bf16_rows.argtypes = [pointer] * 5 + [count, count, pointer, AdamwArgs]
        lib.adamw_bf16_rows.restype = None
        lib.mark_rows_bf16.argtypes = [pointer, count, count, pointer]
        lib.mark_rows_bf16.restype = None
        lib.sum_squares_flagged_bf16.argtypes = [pointer, count, count, count, pointer]
        lib.sum_squares_flagged_bf16.restype = ctypes.c_double
        lib.flush_denormals_on_threads.argtypes = [ctypes.c_int, ctypes.c_int, pointer]
        lib.flush_denormals_on_threads.restype = None
        lib.control_bits_on_threads.argtypes = [ctypes.c_int, pointer]
        lib.control_bits_on_threads.restype = None

    def adamw(self, weight: torch.Tensor | None, grad: torch.Tensor, master: torch.Tensor, exp_avg: torch.Tensor,
              exp_avg_sq: torch.Tensor, args: AdamwArgs) -> list:
        """The calls of one parameter's update: a bf16 `weight` with its fp32
        `master` (rounded into the weight), or, with weight None, an fp32
        parameter that is its own master."""
        for tensor, name in ((master, "master"), (exp_avg, "exp_avg"), (exp_avg_sq, "exp_avg_sq")):
            _check(tensor, torch.float32, name)
            assert tensor.numel() == grad.numel(), f"{name}: {tensor.numel()} elements, the gradient {grad.numel()}"
        if weight is None:
            _check(grad, torch.float32, "grad")
            tensors, function = (grad, master, exp_avg, exp_avg_sq), self.lib.adamw_fp32
        else:
            _check(weight, torch.bfloat16, "weight")
            _check(grad, torch.bfloat16, "grad")
            tensors, function = (weight, grad, master, exp_avg, exp_avg_sq), self.lib.adamw_bf16
        return [(function, (*pointers, count, args), count, tensors) for pointers, count in _chunks(tensors)]

    def adamw_rows(self, weight: torch.Tensor, grad: torch.Tensor, master: torch.Tensor, exp_avg: torch.Tensor,
                   exp_avg_sq: torch.Tensor, active: torch.Tensor, args: AdamwArgs) -> list:
        """The calls of a bf16 embedding table's update over the rows marked
        in `active` (uint8, a flag per row) only: the others must be rows
        that the full update leaves as they are (MasterAdamW.active_rows)."""
        rows, width = weight.shape
        for tensor, name in ((master, "master"), (exp_avg, "exp_avg"), (exp_avg_sq, "exp_avg_sq")):
            _check(tensor, torch.float32, name)
            assert tensor.shape == weight.shape, f"{name}: {tuple(tensor.shape)}, the weight {tuple(weight.shape)}"
        _check(weight, torch.bfloat16, "weight")
        _check(grad, torch.bfloat16, "grad")
        _check(active, torch.uint8, "active")
        assert grad.shape == weight.shape and active.numel() == rows
        tensors = (weight, grad, master, exp_avg, exp_avg_sq)
        return [(self.lib.adamw_bf16_rows, (*pointers, count, width, active.data_ptr() + first, args),
                 count * width, (*tensors, active)) for first, pointers, count in _row_chunks(tensors, rows, width)]

    def mark_rows(self, grad: torch.Tensor, active: torch.Tensor) -> list:
        """The calls that mark in `active` every row of the bf16 table
        `grad` holding a non-zero (rows already marked are not read)."""
        rows, width = grad.shape
        _check(grad, torch.bfloat16, "grad")
        _check(active, torch.uint8, "active")
        return [(self.lib.mark_rows_bf16, (pointers[0], count, width, active.data_ptr() + first), count * width,
                 (grad, active)) for first, pointers, count in _row_chunks((grad,), rows, width)]

    def reaches_torchs_threads(self) -> bool:
        """Whether flush_denormals_on_threads reaches every thread torch's parallel ops run on."""
        return self.openmp or torch.get_num_threads() == 1

    @contextlib.contextmanager
    def denormals_flushed(self):
        """Denormal floats flushed to zero on torch's threads within (train/denormals.py); their bits
        as they were after."""
        threads = torch.get_num_threads()
        saved = (ctypes.c_uint * threads)()
        self.lib.flush_denormals_on_threads(threads, 1, saved)
        try:
            yield
        finally:
            self.lib.flush_denormals_on_threads(threads, 0, saved)

    def control_bits(self) -> list[int]:
        """The SSE control register of each of torch's threads (0 off x86)."""
        threads = torch.get_num_threads()
        bits = (ctypes.c_uint * threads)()
        self.lib.control_bits_on_threads(threads, bits)
        return list(bits)

    def run(self, calls: list) -> list:
        """Every call's result, in order: on torch's OpenMP threads where the build shares its runtime
        (run_calls), else kernel_build.run's Python threads."""
        threads = kernel_build.openmp_threads(self.openmp, len(calls))
        if not threads:
            return run(calls)
        table, sums = (Call * len(calls))(*(as_call(function, args) for function, args, *_ in calls)), \
            (ctypes.c_double * len(calls))()
        self.lib.run_calls(table, len(calls), threads, sums)
        return [sums[i] if function.__name__ in SUMS else None
                for i, (function, *_) in enumerate(calls)]

    def computes_the_float_step(self, n: int = 45) -> bool:
        """Whether one step on a few elements (a vector's worth and a tail)
        gives float_step's bits: every rank's build must compute the same."""
        generator = torch.Generator().manual_seed(0)
        grad, master, exp_avg = (torch.randn(n, generator=generator) for _ in range(3))
        exp_avg_sq = torch.rand(n, generator=generator)
        weight = master.bfloat16()
        for beta1 in (0.9, 0.3):  # both forms of the lerp
            args = adamw_args(1e-2, beta1, 0.999, 0.01, 1e-8, 3.0, 0.75)
            want = float_step(grad.bfloat16(), master, exp_avg, exp_avg_sq, args)
            got = [t.clone() for t in (weight, master, exp_avg, exp_avg_sq)]
            self.run(self.adamw(got[0], grad.bfloat16(), *got[1:], args))
            if not all(torch.equal(a, b) for a, b in zip(got[1:], want)) or not torch.equal(got[0], want[0].bfloat16()):
                return False
        return True

    def sum_squares_bf16(self, grads: list[torch.Tensor], flags: list | None = None) -> float:
        """The sum of the squares of every element of the bf16 `grads`, in double.
        `flags`: per gradient None, or for a 2-D one a uint8 flag per row, 0 only
        where the row is all zeros: those rows are not read (the same bits)."""
        calls = []
        for grad, rows in zip(grads, flags or [None] * len(grads), strict=True):
            _check(grad, torch.bfloat16, "grad")
            if rows is None:
                calls += [(self.lib.sum_squares_bf16, (*pointers, count), count, grad)
                          for pointers, count in _chunks((grad,))]
                continue
            _check(rows, torch.uint8, "flags")
            assert grad.dim() == 2 and rows.numel() == grad.shape[0]
            calls += [(self.lib.sum_squares_flagged_bf16, (pointers[0], count, first, grad.shape[1], rows.data_ptr()),
                       count, (grad, rows)) for first, pointers, count in _row_chunks((grad,), grad.numel(), 1)]
        return math.fsum(self.run(calls))


def float_step(grad: torch.Tensor, master: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
               args: AdamwArgs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(master, exp_avg, exp_avg_sq) after the kernel's step, by float32
    ops one at a time (each rounded, none fused; numpy's square root, as
    torch's CPU sqrt is not correctly rounded): what every build of
    master_adamw.c must give, bit for bit, for values outside the denormal
    range, which the kernel flushes to zero (master_adamw.c denormals_off)."""
    a = {name: torch.tensor(getattr(args, name), dtype=torch.float32) for name in ARGS}
    small = bool(a["exp_avg_weight"].abs() < 0.5)
    lerp = a["exp_avg_weight"] if small else a["exp_avg_weight"] - 1
    g = grad.float() * a["grad_scale"]
    p = master * a["decay"]
    m = (exp_avg if small else g) + lerp * (g - exp_avg)
    v = exp_avg_sq * a["beta2"] + a["exp_avg_sq_weight"] * g * g
    denom = torch.from_numpy(numpy.sqrt(v.numpy())) / a["bias_correction2_sqrt"] + a["eps"]
    return p - a["step_size"] * m / denom, m, v


def _chunks(tensors: tuple) -> list[tuple[list[int], int]]:
    """(pointers, count) per CHUNK elements of equally long tensors."""
    return [(pointers, count) for _, pointers, count in _row_chunks(tensors, tensors[0].numel(), 1)]


def _row_chunks(tensors: tuple, rows: int, width: int) -> list[tuple[int, list[int], int]]:
    """(first row, pointers, rows) per about CHUNK elements of equally
    shaped rows x width tensors, whole rows each."""
    per = max(1, CHUNK // width)
    bases = [(t.data_ptr(), t.element_size()) for t in tensors]
    return [(first, [base + first * width * size for base, size in bases], min(per, rows - first))
            for first in range(0, rows, per)]
