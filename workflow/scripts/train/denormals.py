"""torch's AdamW step with denormal floats flushed to zero on the threads
that run it: every update but bf16_master's one-pass kernel, which flushes
on its own (master_adamw.c). That is the fp32 and bf16 (autocast) paths,
transformers' models, and bf16_master's three-pass path.

A first moment that no gradient feeds (a word-table row no batch has used
for about 700 steps) decays by beta1 a step into the denormal range, where
every operation on it takes a microcode assist: torch's fused CPU AdamW
then spends 17-90 ns on such an element against 1, and in a long run a few
percent of all moments sit there
(bench/results/2026-12-08-xeon-amx-torch-adamw-denormals.txt).
torch.set_flush_denormal sets the calling thread's control bits only, and
the step runs on torch's OpenMP workers: master_adamw.c's
flush_denormals_on_threads sets them on every thread of torch's runtime for
the step and puts them back after, so the forward and backward keep
denormals. Flushed, such a moment stops below 16 x 1.2e-38 or at 0; its
share of the update is under 1e-30, far below a weight's rounding, so the
weights are the same bits (tests/unit/test_optimizer_denormals.py)."""

from __future__ import annotations

import platform

from workflow.scripts.train import master_kernel

X86 = ("x86_64", "amd64", "i386", "i686")


def flushing(optimizer) -> tuple[object | None, str]:
    """(a context for the optimizer's step that flushes denormals on torch's
    threads, or None; the line that says so or why not) for this rank."""
    if getattr(optimizer, "one_pass", False):
        return None, "flushed by the one-pass kernel itself"
    if platform.machine().lower() not in X86:
        return None, f"not flushed: {platform.machine()} has no SSE control register to set"
    kernel, where = master_kernel.load()  # where it is, or why it is not
    if kernel is None:
        return None, f"not flushed: {where}"
    if not kernel.reaches_torchs_threads():
        return None, ("not flushed: the kernel's build does not run on torch's OpenMP runtime, so it cannot "
                      "set its threads' control bits")
    return kernel.denormals_flushed, f"flushed to zero on torch's threads for each step ({where})"
