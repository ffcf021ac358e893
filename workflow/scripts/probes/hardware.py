"""What this CPU is and can do, read from /proc/cpuinfo."""

from __future__ import annotations

import os
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# ISA features worth recording for deep-learning speed on Xeons.
FLAG_PREFIXES = ("avx512", "amx", "avx2", "avx_vnni", "fma")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# The int8 and bf16 instructions that decide what inference precision pays,
# and the int8 ones in order of strength: AMX tiles, then VNNI dot products.
LOW_PRECISION_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16", "avx512_bf16")
INT8_DOT_PRODUCT = (("amx_int8", "AMX int8 tiles"), ("avx512_vnni", "AVX512-VNNI"), ("avx_vnni", "AVX-VNNI"))


def _cpuinfo_blocks(text: str) -> list[dict[str, str]]:
    blocks = []
    for chunk in text.strip().split("\n\n"):
        fields = {}
        for line in chunk.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        blocks.append(fields)
    return blocks


def cpu_summary(text: str | None = None) -> dict:
    """Model name, physical cores, logical CPUs and ISA flags."""
    text = CPUINFO.read_text() if text is None else text
    blocks = [b for b in _cpuinfo_blocks(text) if "processor" in b]
    cores = {(b.get("physical id", "0"), b.get("core id", b["processor"])) for b in blocks}
    flags = set(blocks[0].get("flags", "").split()) if blocks else set()
    return {
        "cpu_model": blocks[0].get("model name", "unknown") if blocks else "unknown",
        "sockets": len({b.get("physical id", "0") for b in blocks}) or 1,
        "physical_cores": len(cores) or os.cpu_count() or 1,
        "logical_cpus": len(blocks) or os.cpu_count() or 1,
        "isa_flags": sorted(f for f in flags if f.startswith(FLAG_PREFIXES)),
    }


def has_native_bf16(flags) -> bool:
    return any(f in flags for f in NATIVE_BF16_FLAGS)


def usable_cores(summary: dict) -> int:
    """Physical cores this process may use (cgroup / affinity limits apply)."""
    allowed = len(os.sched_getaffinity(0))
    per_cpu = summary["logical_cpus"] // max(summary["physical_cores"], 1)
    return max(1, min(summary["physical_cores"], allowed // max(per_cpu, 1)))


def low_precision_support(flags) -> dict:
    """Which int8 / bf16 instructions `flags` have, and what that implies for
    inference: static INT8 is expected to beat fp32 in the same runtime only
    with int8 dot products in hardware (VNNI or AMX); without them the
    runtimes emulate them with ordinary multiply-adds and INT8 is no faster."""
    flags = set(flags)
    int8 = next((name for flag, name in INT8_DOT_PRODUCT if flag in flags), None)
    bf16 = next((f for f in ("amx_bf16", "avx512_bf16") if f in flags), None)
    if int8:
        int8_text = f"int8 dot products in hardware ({int8}): static INT8 expected faster than fp32 in the same runtime"
    else:
        int8_text = ("no int8 dot-product instructions (no avx512_vnni, avx_vnni or amx_int8): INT8 is emulated "
                     "and not expected to be faster than fp32 in the same runtime")
    bf16_text = (f"native bf16 ({bf16}): train.precision auto may pick bf16" if bf16 else
                 "no native bf16: bf16 would be far slower than fp32, train.precision auto keeps fp32")
    return {
        "flags": {f: f in flags for f in LOW_PRECISION_FLAGS},
        "int8_dot_product": int8,
        "int8_expected_to_pay": int8 is not None,
        "native_bf16": bf16,
        "implies": f"{int8_text}; {bf16_text}",
    }


def cpu_tag(summary: dict) -> str:
    """The CPU in one bracket, for every measured figure: model and its int8/bf16 flags."""
    flags = [f for f in LOW_PRECISION_FLAGS if f in summary["isa_flags"]]
    return f"[{summary['cpu_model']}; {' '.join(flags) or 'no vnni/amx/bf16'}]"


def cpu_list(cpus=None) -> str:
    """CPUs in Linux list form ("0-3,8"), as /proc/self/status shows
    Cpus_allowed_list; this process's own by default."""
    ranges: list[list[int]] = []
    for cpu in sorted(os.sched_getaffinity(0) if cpus is None else cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
