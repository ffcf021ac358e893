"""The one-pass dropout of train.speed.dropout_mask `hash`
(train/dropout_kernel.c): built with the system C compiler on first use
(train/kernel_build.py), loaded with ctypes, wrapped in autograd
functions whose backward recomputes the mask from the same seed: dropout
alone (KernelDropout), and the packed attention of a whole layer with
its softmax and dropout in one call (cpuddp's encoder, encoder/attention.py).

The seed of each call is drawn from torch's generator (one int64), so a
run's masks follow from torch.manual_seed and a checkpoint's RNG state,
as torch's dropout does: exact resume holds. With more than one torch
thread a tensor is cut into pieces, and a layer's attention into calls of
whole sequences, run on torch's own OpenMP threads where the build shares
torch's runtime (the *_calls entry points; kernel_build.py), else on as
many Python threads (ctypes releases the GIL); the mask depends on the
element only, so the result is the same on any number of threads.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path

import torch

from workflow.scripts.train import kernel_build
from workflow.scripts.train.kernel_build import CHUNK, run

SOURCE = Path(__file__).with_name("dropout_kernel.c")
BITS = 16  # p is exact to 1/2^16
PIECE = 1 << 16  # elements of a dropout's piece on an OpenMP thread
TYPES = {torch.bfloat16: "bf16", torch.float32: "fp32"}  # the C entry points' suffix per dtype


@dataclass
class Layout:
    """What the kernel's attention needs of a packing: where each sequence's
    keys, queries and probs start (int64 offsets, sequences + 1 each) and the
    sequences of each call (one per torch thread, about equal work)."""

    offsets: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    scores: int
    """Probs kept for backward: sum over sequences of heads x queries x keys."""
    calls: list[tuple[int, int]]
    """(first sequence, sequences) per call."""
    table: torch.Tensor = field(init=False, repr=False)
    """`calls` as int64 [2, calls]: the firsts, then the counts (the OpenMP entry points read them)."""

    def __post_init__(self):
        self.table = torch.tensor(list(zip(*self.calls)) or [[], []], dtype=torch.int64).reshape(2, -1)

    def pointers(self) -> tuple[int, int, int]:
        return tuple(t.data_ptr() for t in self.offsets)

    def call_pointers(self) -> tuple[int, int]:
        return self.table[0].data_ptr(), self.table[1].data_ptr()

    def rows(self) -> tuple[int, int]:
        """(key rows, query rows) the sequences hold: rows past them (bucketed_rows' padding) are no token."""
        return int(self.offsets[0][-1]), int(self.offsets[1][-1])


def zero_past(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """tensor with its rows from `rows` on set to zero, in place."""
    tensor[rows:].zero_()
    return tensor


class Kernel:
    def __init__(self, lib: ctypes.CDLL):
        pointer, count = ctypes.c_void_p, ctypes.c_int64
        self.functions = {torch.bfloat16: lib.dropout_bf16, torch.float32: lib.dropout_fp32}
        for function in self.functions.values():
            function.argtypes = [pointer, pointer, count, ctypes.c_uint64, count, ctypes.c_uint32, ctypes.c_float]
            function.restype = None
        real, seed, threshold = ctypes.c_float, ctypes.c_uint64, ctypes.c_uint32
        offsets = [pointer] * 3 + [count] * 4 + [real, seed, threshold, real]
        on_threads = [pointer] * 2 + [count, ctypes.c_int] + [count] * 2 + [real, seed, threshold, real]
        self.attention_entries = {}
        """Per dtype, the attention's (forward, backward) C functions: one call, then on OpenMP threads."""
        for dtype, name in TYPES.items():
            one = getattr(lib, f"attention_forward_{name}"), getattr(lib, f"attention_backward_{name}")
            many = getattr(lib, f"attention_forward_{name}_calls"), getattr(lib, f"attention_backward_{name}_calls")
            one[0].argtypes, one[1].argtypes = [pointer] * 3 + offsets + [pointer] * 2, \
                [pointer] * 5 + offsets + [pointer] * 3
            many[0].argtypes, many[1].argtypes = [pointer] * 6 + on_threads + [pointer] * 2, \
                [pointer] * 8 + on_threads + [pointer] * 3
            for function in (*one, *many):
                function.restype = ctypes.c_int  # 1: no memory for the scratch
            self.attention_entries[dtype] = one, many
        self.dropout_calls = {torch.bfloat16: lib.dropout_bf16_calls, torch.float32: lib.dropout_fp32_calls}
        for function in self.dropout_calls.values():
            function.argtypes = [pointer, pointer, count, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_float, count,
                                 ctypes.c_int]
            function.restype = None
        self.lib = lib
        self.openmp = kernel_build.shares_torchs_openmp(lib)
        """Calls on torch's OpenMP threads (the *_calls entry points), else on Python threads (run())."""

    def threads(self, calls: int) -> int:
        return kernel_build.openmp_threads(self.openmp, calls)

    def dropout(self, x: torch.Tensor, seed: int, dropped: int, scale: float) -> torch.Tensor:
        """x x scale where kept, else 0: a new contiguous tensor."""
        x = x.contiguous()
        y = torch.empty_like(x)
        threads = self.threads(x.numel() // PIECE)
        if threads:
            self.dropout_calls[x.dtype](x.data_ptr(), y.data_ptr(), x.numel(), seed, dropped, scale, PIECE, threads)
            return y
        function, size = self.functions[x.dtype], x.element_size()
        calls = [(function, (x.data_ptr() + start * size, y.data_ptr() + start * size, min(CHUNK,
                 x.numel() - start), seed, start, dropped, scale), min(CHUNK, x.numel() - start), (x, y))
                 for start in range(0, x.numel(), CHUNK)]
        run(calls)
        return y

    def attention(self, q, k, v, layout, heads: int, scaling: float, seed: int, dropped: int,
                  keep_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(out, probs) of the packed attention (dropout_kernel.c) of contiguous
        q [query rows, hidden], k and v [tokens, hidden], all bf16 or all fp32; `layout`: the
        offsets and each call's sequences (Layout). Rows past the layout's
        queries and tokens are read by nothing: out's are zero."""
        out, probs = zero_past(torch.empty_like(q), layout.rows()[1]), q.new_empty(layout.scores)
        size = q.shape[1] // heads
        threads = self.threads(len(layout.calls))
        (forward, _), (forward_calls, _) = self.attention_entries[q.dtype]
        if threads:
            enough_memory([forward_calls(
                q.data_ptr(), k.data_ptr(), v.data_ptr(), *layout.pointers(), *layout.call_pointers(),
                len(layout.calls), threads, heads, size, scaling, seed, dropped, keep_scale, probs.data_ptr(),
                out.data_ptr())], "forward", layout)
            return out, probs
        calls = [(forward, (q.data_ptr(), k.data_ptr(), v.data_ptr(), *layout.pointers(), first,
                                           count, heads, size, scaling, seed, dropped, keep_scale,
                                           probs.data_ptr(), out.data_ptr()), CHUNK, (q, k, v, out, probs, layout))
                 for first, count in layout.calls]
        enough_memory(run(calls), "forward", layout)
        return out, probs

    def attention_backward(self, grad, q, k, v, probs, layout, heads: int, scaling: float, seed: int,
                           dropped: int, keep_scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The gradients of q, k and v from that of attention()'s out (zero
        in the rows past the layout's queries and tokens)."""
        grad = grad.contiguous().to(q.dtype)
        keys, queries = layout.rows()
        dq, dk, dv = zero_past(torch.empty_like(q), queries), zero_past(torch.empty_like(k), keys), \
            zero_past(torch.empty_like(v), keys)
        size = q.shape[1] // heads
        threads = self.threads(len(layout.calls))
        (_, backward), (_, backward_calls) = self.attention_entries[q.dtype]
        if threads:
            enough_memory([backward_calls(
                grad.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), probs.data_ptr(), *layout.pointers(),
                *layout.call_pointers(), len(layout.calls), threads, heads, size, scaling, seed, dropped,
                keep_scale, dq.data_ptr(), dk.data_ptr(), dv.data_ptr())], "backward", layout)
            return dq, dk, dv
        calls = [(backward,
                  (grad.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), probs.data_ptr(), *layout.pointers(),
                   first, count, heads, size, scaling, seed, dropped, keep_scale, dq.data_ptr(), dk.data_ptr(),
                   dv.data_ptr()), CHUNK, (grad, q, k, v, probs, dq, dk, dv, layout))
                 for first, count in layout.calls]
        enough_memory(run(calls), "backward", layout)
        return dq, dk, dv

    def agrees_with_its_definition(self) -> bool:
        """Whether the build keeps exactly the elements whose hash says so and
        scales them as torch rounds (a compiler that breaks either is refused)."""
        x = torch.arange(1, 4097, dtype=torch.float32)
        y = self.dropout(x, 0x123456789ABCDEF0, dropped(0.25), 2.0)
        kept = y != 0
        want = torch.where(keep_reference(4096, 0x123456789ABCDEF0, dropped(0.25)), x * 2.0, 0.0)
        half = self.dropout(x.bfloat16(), 0x123456789ABCDEF0, dropped(0.25), 1.1)
        return torch.equal(y, want) and torch.equal(half, torch.where(kept, x.bfloat16() * 1.1, 0.0).bfloat16())

    def attention_is_torchs(self, lengths=(37, 5), heads: int = 2, size: int = 24,
                            dtype: torch.dtype = torch.bfloat16) -> bool:
        """Whether the packed attention, forward and backward, is torch's
        softmax(q k^T scaling) v on a small input (dropout off): two
        sequences, one longer than the kernel's blocks of 16 keys, a head
        size that is no vector width's multiple; within 2% in norm, where
        bf16's rounding gives some 0.2% (fp32's 1e-6) and a wrong build far more."""
        generator = torch.Generator().manual_seed(0)
        tokens, scaling = sum(lengths), size ** -0.5
        q, k, v, grad = (torch.randn(tokens, heads * size, generator=generator).to(dtype) for _ in range(4))
        offsets = torch.tensor([0, lengths[0], tokens], dtype=torch.int64)
        probs = torch.tensor([0, heads * lengths[0] ** 2, heads * sum(n * n for n in lengths)], dtype=torch.int64)
        plan = Layout((offsets, offsets, probs), int(probs[-1]), [(0, len(lengths))])
        out, saved = self.attention(q, k, v, plan, heads, scaling, 0, 0, 1.0)
        got = (out, *self.attention_backward(grad, q, k, v, saved, plan, heads, scaling, 0, 0, 1.0))
        leaves = [t.float().requires_grad_() for t in (q, k, v)]
        parts = []
        for start, n in ((0, lengths[0]), (lengths[0], lengths[1])):
            qs, ks, vs = (t[start:start + n].view(n, heads, size).transpose(0, 1) for t in leaves)
            context = torch.softmax(qs @ ks.transpose(-1, -2) * scaling, dim=-1) @ vs
            parts.append(context.transpose(0, 1).reshape(n, heads * size))
        want = torch.cat(parts)
        want.backward(grad.float())
        return all(bool((a.float() - b).norm() <= 0.02 * b.norm())
                   for a, b in zip(got, (want.detach(), *(t.grad for t in leaves))))

    def computes_its_definitions(self) -> bool:
        """The dropout's mask and the attention, each checked when the build loads."""
        return self.agrees_with_its_definition() and all(self.attention_is_torchs(dtype=dtype)
                                                         for dtype in self.attention_entries)


def enough_memory(results: list, doing: str, layout) -> None:
    """The attention calls return 1 where their scratch could not be allocated (nothing computed)."""
    if any(results):
        keys = layout.offsets[0]
        raise MemoryError(f"the attention kernel's {doing} found no memory for its scratch (sequences of up to "
                          f"{int((keys[1:] - keys[:-1]).max())} tokens); free memory on this node or lower "
                          "train.batch_size")


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


def build(cc: str | None = None, cache: Path | None = None, source: Path = SOURCE) -> tuple[Kernel | None, str]:
    """(kernel, where) or (None, why not); `source`: another C file for the
    same loader and checks (a test's deliberately wrong copy)."""
    return kernel_build.build_checked(source, Kernel, Kernel.computes_its_definitions,
                                      "drops other elements than its definition, or its attention is not torch's "
                                      "on a small input (a miscompiled build?): not used", cc, cache)


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
