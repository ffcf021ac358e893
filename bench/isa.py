"""A bench run as a CPU of a narrower ISA runs it (`--isa avx2`): every
library that picks its code from the CPU's flags is held to AVX2 + FMA, on
both sides of a pair. torch's own kernels (ATEN_CPU_CAPABILITY), oneDNN
(ONEDNN_MAX_CPU_ISA), MKL's fp32 matmuls (MKL_ENABLE_INSTRUCTIONS) and
cpuddp's C kernels, built for x86-64-v3 alone instead of dispatching
(kernel_build.fixed_isa_compiler: CC with -DCLONES=;
tests/integration/test_kernel_isa.py checks that build's bits). The bench
re-executes itself with these set, so they hold from the first import on,
in it, in the Trainer's processes and in cpuddp's ranks (distributed.env).

It is the instruction set of an AVX2-only CPU (such as an EPYC before Zen 4)
on this CPU's cores, caches and memory: closer than fp32 on AVX-512 kernels,
still not a measurement of such a CPU, and reported as that.
"""

from __future__ import annotations

import os
import sys

from workflow.scripts.train import kernel_build

MARKER = "CPUDDP_BENCH_ISA"
LIMITS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}
MARCH = {"avx2": "x86-64-v3"}


def limits(isa: str) -> dict[str, str]:
    """The variables that hold every library to `isa`, the C compiler's included."""
    return {**LIMITS[isa], "CC": kernel_build.fixed_isa_compiler(MARCH[isa]), MARKER: isa}


def held_to() -> str | None:
    """The ISA this process runs held to (after reexec_held_to), or None."""
    return os.environ.get(MARKER)


def rank_env() -> dict[str, str]:
    """What cpuddp's ranks and the Trainer's must get to run as this process does (any MPI's forwarding)."""
    isa = held_to()
    return {key: os.environ[key] for key in (*LIMITS[isa], "CC", MARKER)} if isa else {}


def reexec_held_to(isa: str | None, module: str) -> None:
    """Run `python -m module` with this process's arguments again, held to
    `isa`, unless it already is (or isa is None)."""
    if isa is None or held_to() == isa:
        return
    env = {**os.environ, **limits(isa)}
    os.execve(sys.executable, [sys.executable, "-m", module, *sys.argv[1:]], env)


def describe() -> str:
    """'' or, held, the line a bench prints under its CPU line."""
    isa = held_to()
    if not isa:
        return ""
    import torch

    return (f"held to {isa}: torch's kernels at {torch.backends.cpu.get_cpu_capability()}, "
            + ", ".join(f"{k}={v}" for k, v in rank_env().items() if k != MARKER)
            + " (this CPU's cores with an AVX2-only CPU's instructions: a proxy, not such a CPU)")
