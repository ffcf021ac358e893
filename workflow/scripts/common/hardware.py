"""What this CPU is and can do, read from /proc/cpuinfo."""

from __future__ import annotations

import os
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# ISA features worth recording for deep-learning speed on Xeons.
FLAG_PREFIXES = ("avx512", "amx", "avx2", "avx_vnni", "fma")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


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
