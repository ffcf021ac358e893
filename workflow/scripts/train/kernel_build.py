"""Build cpuddp's C kernels (train/*.c) with the system C compiler on their
first use on a machine, cache them, load them with ctypes.

The build goes to $CPUDDP_KERNEL_CACHE or ~/.cache/cpuddp/kernels, in a
folder named by the sha256 of the source, the flags and the compiler's
`--version`, written under a temporary name and renamed into place, so
ranks building at once do not trip over each other. A kernel that cannot
be built gives a one-line reason, never an exception: training then takes
torch's path and the log says why.

ctypes releases the GIL during a call: with more than one torch thread the
calls run on that many Python threads (run()), big tensors cut into chunks
of CHUNK elements.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

# -ffp-contract=off: no multiply and add fused by the compiler, so every
# target clone (and CPU) computes the same bits; -fno-math-errno lets sqrtf
# vectorise. No -march: target_clones picks the ISA at run time.
FLAGS = ("-O3", "-shared", "-fPIC", "-fno-math-errno", "-ffp-contract=off")
CHUNK = 1 << 20  # elements per call: a multiple of the sum's 16 lanes


def cache_root() -> Path:
    return Path(os.environ.get("CPUDDP_KERNEL_CACHE") or Path.home() / ".cache" / "cpuddp" / "kernels")


def compile_and_load(source: Path, cc: str | None = None, cache: Path | None = None) -> tuple[ctypes.CDLL | None, str]:
    """(the loaded library, its path) or (None, why not), built with
    compiler `cc` ($CC, else cc)."""
    command = shlex.split(cc or os.environ.get("CC") or "cc")
    if not command or shutil.which(command[0]) is None:
        return None, f"no C compiler ({' '.join(command) or 'CC is empty'} not found; set CC)"
    try:
        version = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60).stdout
        key = hashlib.sha256(source.read_bytes() + " ".join([*command, *FLAGS, version]).encode()).hexdigest()
        folder = (cache or cache_root()) / key[:16]
        target = folder / source.with_suffix(".so").name
        if not target.exists():
            folder.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=folder, prefix=".build-", suffix=".so")
            os.close(handle)
            done = subprocess.run([*command, *FLAGS, "-o", temporary, str(source), "-lm"], capture_output=True,
                                  text=True, timeout=300)
            if done.returncode:
                os.unlink(temporary)
                lines = done.stderr.strip().splitlines() or ["no output"]
                first = next((line for line in lines if "error" in line), lines[-1])
                return None, f"{' '.join(command)} could not build {source.name}: {first}"
            os.replace(temporary, target)
        return ctypes.CDLL(str(target)), str(target)
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"{source.name} could not be built or loaded: {error}"



def build_checked(source: Path, wrap, sound, refusal: str, cc: str | None = None,
                  cache: Path | None = None) -> tuple:
    """(wrap(library), its path), or (None, why not): built by
    compile_and_load, refused with "<path> <refusal>" unless the wrapper's
    `sound(kernel)` says the build computes what it defines."""
    lib, where = compile_and_load(source, cc, cache)
    if lib is None:
        return None, where
    kernel = wrap(lib)
    if not sound(kernel):
        return None, f"{where} {refusal}"
    return kernel, where

_LOADED: dict[tuple, tuple] = {}


def once(source: Path, build) -> tuple:
    """build() of `source`'s kernel once per process for this $CC and cache folder."""
    key = (source, os.environ.get("CC"), os.environ.get("CPUDDP_KERNEL_CACHE"))
    if key not in _LOADED:
        _LOADED[key] = build()
    return _LOADED[key]


@functools.cache
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cpuddp-kernel")


def run(calls: list) -> list:
    """Every call's result, in order, for calls (function, arguments,
    elements, the tensors it reads and writes, held until it is done): on
    torch's thread count of Python threads (ctypes releases the GIL in a
    call), in jobs of consecutive calls of about CHUNK elements, or in this
    thread."""
    workers = torch.get_num_threads()
    if workers == 1 or len(calls) < 2:
        return [function(*args) for function, args, *_ in calls]
    jobs, job, size = [], [], 0
    for call in calls:
        job.append(call)
        size += call[2]
        if size >= CHUNK:
            jobs.append(job)
            job, size = [], 0
    jobs += [job] if job else []
    done = _pool(workers).map(lambda job: [function(*args) for function, args, *_ in job], jobs)
    return [result for results in done for result in results]
