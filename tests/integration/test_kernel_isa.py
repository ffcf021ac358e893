"""The C kernels as a CPU of another ISA runs them. The loader's build
dispatches at run time (target_clones) to the widest code this CPU has, so
on an AVX-512 machine the tests never run the AVX2 code an AVX2-only EPYC
trains with, nor the plain x86-64 fallback. Here each kernel is built with
the ISA fixed (kernel_build.fixed_isa_compiler: CC="cc -march=... -DCLONES=
-DCLONES_FMA=", which keys the cache), checked to hold no wider instruction, and
must compute what the dispatching build computes on the same inputs: the
dropout masks, the one-pass AdamW and its clip norm bit for bit on every ISA
(-ffp-contract=off); the attention and the add-norm pass bit for bit where
the ISA has FMA (x86-64-v3, AVX2), and within fp32's or bf16's rounding
without it (their fp-contract=fast region then multiplies and adds apart).
On a CPU with AVX512_BF16 the dispatching build rounds the add-norm's rows
by vcvtneps2bf16, which flushes denormals: against the AVX2 build's
software rounding, denormals, NaN, infinities and ties come out the same."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

import pytest
import torch

from helpers.add_norm_calls import fused
from helpers.bits import bits
from workflow.scripts.probes import hardware
from workflow.scripts.train import dropout_kernel, kernel_build, master_kernel
from workflow.scripts.train.dropout_kernel import Layout, dropped, keep_scale

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("objdump") is None
                                or os.uname().machine != "x86_64", reason="needs cc, objdump and x86-64")

# -march level: (the lscpu flags it needs, whether it has FMA, the register a wider ISA would use)
ISAS = {"x86-64-v3": (("avx2", "fma"), True, "%zmm"), "x86-64": ((), False, "%ymm")}
FP32_GAP, BF16_GAP = 1e-6, 1e-3  # relative gap in norm allowed without FMA (seen: 2e-7, 2e-6)


@pytest.fixture(scope="module", params=list(ISAS))
def isa(request, tmp_path_factory):
    """(march, has FMA, the dropout kernel and the one-pass kernel built for it alone)."""
    needs, fma, wider = ISAS[request.param]
    missing = set(needs) - set(hardware.cpu_summary()["isa_flags"])
    if missing:
        pytest.skip(f"this CPU lacks {' '.join(sorted(missing))}")
    cache = tmp_path_factory.mktemp(request.param)
    built = []
    for module in (dropout_kernel, master_kernel):
        kernel, where = module.build(kernel_build.fixed_isa_compiler(request.param), cache)
        assert kernel is not None, where
        code = subprocess.run(["objdump", "-d", where], capture_output=True, text=True, check=True).stdout
        assert wider not in code, f"{where}: {wider} registers in a {request.param} build"
        built.append(kernel)
    return request.param, fma, *built


@pytest.fixture(scope="module")
def native(hash_dropout_kernel, one_pass_kernel):
    if hash_dropout_kernel[0] is None or one_pass_kernel[0] is None:
        pytest.skip(f"the dispatching build did not load: {hash_dropout_kernel[1]}; {one_pass_kernel[1]}")
    return hash_dropout_kernel[0], one_pass_kernel[0]


def same_or_close(got, want, fma: bool, dtype: torch.dtype) -> None:
    for a, b in zip(got, want):
        if fma:
            assert torch.equal(a, b)
        else:
            gap = FP32_GAP if dtype == torch.float32 else BF16_GAP
            assert (a.double() - b.double()).norm() <= gap * b.double().norm()


def dispatching_build_code(flag: str) -> str:
    """The disassembly of the loader's dispatching build, on a CPU with the lscpu `flag` (else the test skips)."""
    if flag not in hardware.cpu_summary()["isa_flags"]:
        pytest.skip(f"this CPU lacks {flag}")
    return subprocess.run(["objdump", "-d", dropout_kernel.load()[1]], capture_output=True, text=True,
                          check=True).stdout


def test_the_dispatching_build_holds_avx512_code_on_an_avx512_cpu(native):
    """So the fixture's check for wider registers is no formality."""
    assert "%zmm" in dispatching_build_code("avx512f")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_dropout_masks_are_the_same_bits(isa, native, dtype):
    x = torch.randn(100_003, generator=torch.Generator().manual_seed(1)).to(dtype)
    args = (0x5EED, dropped(0.1), keep_scale(0.1))
    assert torch.equal(isa[2].dropout(x, *args), native[0].dropout(x, *args))


def attention_both_ways(kernel, dtype, lengths=(70, 33, 17, 5), heads=2, size=64):
    """Forward and backward of the packed attention with dropout, on sequences longer than its blocks."""
    generator = torch.Generator().manual_seed(2)
    tokens = sum(lengths)
    q, k, v, grad = (torch.randn(tokens, heads * size, generator=generator).to(dtype) for _ in range(4))
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int64)
    probs = torch.tensor([0, *torch.tensor([heads * n * n for n in lengths]).cumsum(0).tolist()], dtype=torch.int64)
    layout = Layout((offsets, offsets, probs), int(probs[-1]), [(0, 2), (2, 2)])
    args = (heads, size ** -0.5, 0x5EED, dropped(0.1), keep_scale(0.1))
    out, saved = kernel.attention(q, k, v, layout, *args)
    return (out, saved, *kernel.attention_backward(grad, q, k, v, saved, layout, *args))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_attention_is_the_same_bits_with_fma_and_within_rounding_without(isa, native, dtype):
    same_or_close(attention_both_ways(isa[2], dtype), attention_both_ways(native[0], dtype), isa[1], dtype)


def add_norm_both_ways(kernel, dtype, rows=203, width=384):
    generator = torch.Generator().manual_seed(3)
    a, r, grad = (torch.randn(rows, width, generator=generator).to(dtype) for _ in range(3))
    weight = (1 + 0.1 * torch.randn(width, generator=generator)).to(dtype)
    bias = (0.1 * torch.randn(width, generator=generator)).to(dtype)
    return fused(kernel, a, r, weight, bias, grad, seed=4)  # the pass draws its mask seed from torch's generator


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_add_norm_pass_is_the_same_bits_with_fma_and_within_rounding_without(isa, native, dtype):
    same_or_close(add_norm_both_ways(isa[2], dtype), add_norm_both_ways(native[0], dtype), isa[1], dtype)


def adamw_steps(kernel, n=4099, steps=3):
    """Three one-pass steps of a bf16 weight with fp32 masters, clipped by the kernel's own norm."""
    generator = torch.Generator().manual_seed(5)
    master = torch.randn(n, generator=generator)
    weight, exp_avg, exp_avg_sq = master.bfloat16(), torch.zeros(n), torch.zeros(n)
    norms = []
    for step in range(1, steps + 1):
        grad = (3 * torch.randn(n, generator=generator)).bfloat16()
        norms.append(torch.tensor(kernel.sum_squares_bf16([grad]), dtype=torch.float64))
        scale = min(1.0, 1.0 / (float(norms[-1]) ** 0.5 + 1e-6))
        args = master_kernel.adamw_args(1e-3, 0.9, 0.999, 0.0, 1e-8, float(step), scale)
        kernel.run(kernel.adamw(weight, grad, master, exp_avg, exp_avg_sq, args))
    return (weight, master, exp_avg, exp_avg_sq, *norms)


def test_the_one_pass_adamw_and_its_clip_norm_are_the_same_bits_on_every_isa(isa, native):
    for a, b in zip(adamw_steps(isa[3]), adamw_steps(native[1])):
        assert torch.equal(a, b)


def test_the_fixed_isa_is_part_of_the_cache_key(isa, tmp_path):
    """Two builds of one source for two ISAs never share a cached library."""
    command = shlex.split(kernel_build.fixed_isa_compiler(isa[0]))
    other = shlex.split(kernel_build.fixed_isa_compiler("x86-64-v2"))
    assert kernel_build.cached_path(dropout_kernel.SOURCE, command, tmp_path) != \
        kernel_build.cached_path(dropout_kernel.SOURCE, other, tmp_path)


def test_the_dispatching_build_rounds_rows_by_the_instruction_on_an_avx512_bf16_cpu(isa, native):
    """So the test below compares the instruction's rounding with the software's, not one with itself: the
    dispatching build holds it and picks it here; a build fixed at an ISA without it does not."""
    assert "vcvtneps2bf16" in dispatching_build_code("avx512_bf16")
    assert native[0].lib.rounding_instruction() == 1
    assert isa[2].lib.rounding_instruction() == 0


def special_rows(rows=48, width=384):
    """bf16 rows of normal values, of denormals (the instruction flushes those: the kernel rounds them in
    software), of NaN and infinities, and of sums that land on rounding ties."""
    generator = torch.Generator().manual_seed(6)
    a, r, grad = (torch.randn(rows, width, generator=generator) for _ in range(3))
    a[8:16] *= 1e-39
    r[8:16] *= 1e-39
    grad[16:24] *= 1e-39
    a[24, 5], r[25, 7], a[26, 9], grad[27, 11] = float("nan"), float("inf"), -float("inf"), float("nan")
    a[32:40] = 1.0
    r[32:40] = 2.0 ** -8  # 1 + 2^-8: a tie between two bf16 values
    return a.bfloat16(), r.bfloat16(), grad.bfloat16()


def test_the_add_norm_pass_rounds_denormals_nan_infinities_and_ties_in_software_and_by_instruction_alike(isa, native):
    """Bit for bit where the ISA has FMA; without it (the norm then sums in another order) NaN where the
    dispatching build has NaN and the rest within bf16's rounding."""
    a, r, grad = special_rows()
    weight, bias = torch.ones(a.shape[1]).bfloat16(), torch.zeros(a.shape[1]).bfloat16()
    got, want = (fused(kernel, a, r, weight, bias, grad) for kernel in (isa[2], native[0]))
    for x, y in zip(got, want):
        if isa[1]:
            assert torch.equal(bits(x), bits(y))
        else:
            assert torch.equal(x.isnan(), y.isnan())
            same_or_close([x.nan_to_num(0.0)], [y.nan_to_num(0.0)], False, torch.bfloat16)
    assert got[0][8:16].isfinite().all() and got[0][24:28].isnan().any()
